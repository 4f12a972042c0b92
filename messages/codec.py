"""Messages as JSON-able values: content parts, prompts, turn results.

The session store keeps histories in this form and the worker pipes carry prompts and
results in it, so both speak one encoding. Each ``dump_*`` has a ``load_*`` that rebuilds
the same frozen value; a ``load_*`` given anything else raises ``CodecError`` naming it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, assert_never, get_args

from toolprep.messages.content import (
    Content,
    FunctionCall,
    FunctionCallPart,
    FunctionResponse,
    FunctionResponsePart,
    Part,
    TextPart,
    ThoughtPart,
    Usage,
)
from toolprep.messages.turns import StopReason, TurnFailure, TurnResult, UserMessage

__all__ = [
    "CodecError",
    "dump_content",
    "dump_parts",
    "dump_prompt",
    "dump_result",
    "load_content",
    "load_parts",
    "load_prompt",
    "load_result",
]

_STOP_REASONS: frozenset[str] = frozenset(get_args(StopReason))
_TURN_FAILURES: frozenset[str] = frozenset(get_args(TurnFailure))


class CodecError(ValueError):
    """A value that is not the encoding of the message it was read as."""


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
        raise CodecError(f"prompt parts must be a list, not {type(raw).__name__}")
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
            raise CodecError(f"not a prompt part: {raw!r}")


def dump_content(content: Content) -> dict[str, Any]:
    """One message of a history: who said it and its parts."""
    return {"role": content.role, "parts": dump_parts(content.parts)}


def load_content(raw: Any) -> Content:
    match raw:
        case {"role": "user" | "model" as role, "parts": parts}:
            return Content(role, tuple(load_parts(parts)))
        case _:
            raise CodecError(f"not a history message: {raw!r}")


def dump_prompt(parts: Sequence[Part], user_message: UserMessage | None) -> dict[str, Any]:
    """A prompt as it crosses to a worker: the model's parts and what the client sent."""
    said: dict[str, Any] | None = None
    if user_message is not None:
        said = {"id": user_message.message_id, "blocks": list(user_message.blocks)}
        if user_message.trace_context:
            said["trace"] = user_message.trace_context
    return {"parts": dump_parts(parts), "user_message": said}


def load_prompt(raw: Any) -> tuple[list[Part], UserMessage | None]:
    match raw:
        case {"parts": parts, "user_message": None}:
            return load_parts(parts), None
        case {
            "parts": parts,
            "user_message": {"id": str(message_id), "blocks": list(blocks)} as said,
        } if all(isinstance(block, dict) for block in blocks):
            trace = said.get("trace", {})
            if not isinstance(trace, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in trace.items()
            ):
                raise CodecError(f"not a trace context: {trace!r}")
            return load_parts(parts), UserMessage(message_id, tuple(blocks), trace)
        case _:
            raise CodecError(f"not a prompt: {raw!r}")


def dump_result(result: TurnResult) -> dict[str, Any]:
    usage = result.usage
    return {
        "stop_reason": result.stop_reason,
        "error": result.error,
        "usage": None if usage is None else [usage.input_tokens, usage.output_tokens],
        "failure": result.failure,
    }


def load_result(raw: Any) -> TurnResult:
    match raw:
        case {"stop_reason": stop_reason, "error": error, "usage": usage}:
            pass
        case _:
            raise CodecError(f"not a turn result: {raw!r}")
    if stop_reason is not None and stop_reason not in _STOP_REASONS:
        raise CodecError(f"unknown stop reason {stop_reason!r}")
    if error is not None and not isinstance(error, str):
        raise CodecError(f"a turn error must be text, not {error!r}")
    failure = raw.get("failure")
    if failure is not None and failure not in _TURN_FAILURES:
        raise CodecError(f"unknown turn failure {failure!r}")
    loaded_usage = None
    match usage:
        case None:
            pass
        case [int(input_tokens), int(output_tokens)]:
            loaded_usage = Usage(input_tokens, output_tokens)
        case _:
            raise CodecError(f"not token usage: {usage!r}")
    return TurnResult(stop_reason, error=error, usage=loaded_usage, failure=failure)
