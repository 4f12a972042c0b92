"""What crosses the worker pipes, as JSON-able values: prompts, turn results,
the requests a session sends its caller, the caller's answers, and the MCP
servers a session is opened with (in their ACP shape). The session store keeps
histories in the same form of parts.

Each ``dump_*`` has a ``load_*`` that rebuilds the same frozen value, so both
sides of a pipe speak the types of ``messages`` and ``session_host`` and
nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, assert_never, get_args

from toolprep.messages.content import (
    FunctionCall,
    FunctionCallPart,
    FunctionResponse,
    FunctionResponsePart,
    Part,
    TextPart,
    ThoughtPart,
    Usage,
)
from toolprep.messages.modes import check_mode
from toolprep.messages.turns import StopReason, TurnResult, UserMessage
from toolprep.runtime.mcp.specs import McpServerSpec, parse_servers, to_acp
from toolprep.runtime.session_host import (
    ClientRequest,
    EditorAnswer,
    EditorFailed,
    FileRead,
    FileWritten,
    ReadTextFile,
    RequestPermission,
    SessionConfig,
    WriteTextFile,
)
from toolprep.runtime.workers.wire import WireError

_STOP_REASONS: frozenset[str] = frozenset(get_args(StopReason))


def dump_parts(parts: Sequence[Part]) -> list[dict[str, Any]]:
    return [_dump_part(part) for part in parts]


def _dump_part(part: Part) -> dict[str, Any]:
    match part:
        case TextPart(text=text):
            return {"type": "text", "text": text}
        case ThoughtPart(text=text, signature=signature):
            return {"type": "thought", "text": text, "signature": signature}
        case FunctionCallPart(function_call=call):
            return {"type": "call", "id": call.id, "name": call.name, "args": call.args}
        case FunctionResponsePart(function_response=response):
            return {
                "type": "response",
                "id": response.id,
                "name": response.name,
                "response": response.response,
                "is_error": response.is_error,
            }
        case _:
            assert_never(part)


def load_parts(raw: Any) -> list[Part]:
    if not isinstance(raw, list):
        raise WireError(f"prompt parts must be a list, not {type(raw).__name__}")
    return [_load_part(item) for item in raw]


def _load_part(raw: Any) -> Part:
    match raw:
        case {"type": "text", "text": str(text)}:
            return TextPart(text)
        case {"type": "thought", "text": str(text), "signature": signature}:
            return ThoughtPart(text, signature if isinstance(signature, str) else None)
        case {"type": "call", "id": str(id_), "name": str(name), "args": dict(args)}:
            return FunctionCallPart(FunctionCall(id_, name, args))
        case {
            "type": "response",
            "id": str(id_),
            "name": str(name),
            "response": dict(response),
            "is_error": bool(is_error),
        }:
            return FunctionResponsePart(FunctionResponse(id_, name, response, is_error))
        case _:
            raise WireError(f"not a prompt part: {raw!r}")


def dump_prompt(parts: Sequence[Part], user_message: UserMessage | None) -> dict[str, Any]:
    """A prompt as it crosses to a worker: the model's parts and what the client sent."""
    said = None
    if user_message is not None:
        said = {"id": user_message.message_id, "blocks": list(user_message.blocks)}
    return {"parts": dump_parts(parts), "user_message": said}


def load_prompt(raw: Any) -> tuple[list[Part], UserMessage | None]:
    match raw:
        case {"parts": parts, "user_message": None}:
            return load_parts(parts), None
        case {"parts": parts, "user_message": {"id": str(message_id), "blocks": list(blocks)}} if (
            all(isinstance(block, dict) for block in blocks)
        ):
            return load_parts(parts), UserMessage(message_id, tuple(blocks))
        case _:
            raise WireError(f"not a prompt: {raw!r}")


def dump_result(result: TurnResult) -> dict[str, Any]:
    usage = result.usage
    return {
        "stop_reason": result.stop_reason,
        "error": result.error,
        "usage": None if usage is None else [usage.input_tokens, usage.output_tokens],
    }


def load_result(raw: Any) -> TurnResult:
    match raw:
        case {"stop_reason": stop_reason, "error": error, "usage": usage}:
            pass
        case _:
            raise WireError(f"not a turn result: {raw!r}")
    if stop_reason is not None and stop_reason not in _STOP_REASONS:
        raise WireError(f"unknown stop reason {stop_reason!r}")
    if error is not None and not isinstance(error, str):
        raise WireError(f"a turn error must be text, not {error!r}")
    loaded_usage = None
    match usage:
        case None:
            pass
        case [int(input_tokens), int(output_tokens)]:
            loaded_usage = Usage(input_tokens, output_tokens)
        case _:
            raise WireError(f"not token usage: {usage!r}")
    return TurnResult(stop_reason, error=error, usage=loaded_usage)


def dump_request(request: ClientRequest) -> dict[str, Any]:
    match request:
        case RequestPermission(request_id=rid, tool_call=tool_call):
            return {"type": "permission", "id": rid, "tool_call": tool_call}
        case ReadTextFile(request_id=rid, path=path, line=line, limit=limit):
            return {"type": "read", "id": rid, "path": path, "line": line, "limit": limit}
        case WriteTextFile(request_id=rid, path=path, content=content):
            return {"type": "write", "id": rid, "path": path, "content": content}
        case _:
            assert_never(request)


def load_request(raw: Any) -> ClientRequest:
    match raw:
        case {"type": "permission", "id": str(rid), "tool_call": dict(tool_call)}:
            return RequestPermission(rid, tool_call)
        case {"type": "read", "id": str(rid), "path": str(path), "line": line, "limit": limit}:
            return ReadTextFile(rid, path, _optional_int(line), _optional_int(limit))
        case {"type": "write", "id": str(rid), "path": str(path), "content": str(content)}:
            return WriteTextFile(rid, path, content)
        case _:
            raise WireError(f"not a client request: {raw!r}")


def dump_answer(answer: EditorAnswer) -> dict[str, Any]:
    match answer:
        case FileRead(content=content):
            return {"type": "read", "content": content}
        case FileWritten():
            return {"type": "written"}
        case EditorFailed(reason=reason):
            return {"type": "failed", "reason": reason}
        case _:
            assert_never(answer)


def load_answer(raw: Any) -> EditorAnswer:
    match raw:
        case {"type": "read", "content": str(content)}:
            return FileRead(content)
        case {"type": "written"}:
            return FileWritten()
        case {"type": "failed", "reason": str(reason)}:
            return EditorFailed(reason)
        case _:
            raise WireError(f"not an editor answer: {raw!r}")


def dump_mcp_servers(specs: Sequence[McpServerSpec]) -> list[dict[str, Any]]:
    return [to_acp(spec) for spec in specs]


def load_mcp_servers(raw: Any) -> tuple[McpServerSpec, ...]:
    try:
        return parse_servers(raw, field="mcp_servers")
    except ValueError as exc:
        raise WireError(f"not MCP servers: {exc}") from None


def dump_config(config: SessionConfig) -> dict[str, Any]:
    return {"model": config.model, "models": list(config.models), "mode": config.mode}


def load_config(raw: Any) -> SessionConfig:
    match raw:
        case {"model": str(model), "models": list(models), "mode": str(mode)} if all(
            isinstance(m, str) for m in models
        ):
            try:
                return SessionConfig(model, tuple(models), check_mode(mode))
            except ValueError as exc:
                raise WireError(f"not a session config: {exc}") from None
        case _:
            raise WireError(f"not a session config: {raw!r}")


def _optional_int(value: Any) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise WireError(f"expected a whole number or null, not {value!r}")
