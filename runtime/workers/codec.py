"""The session-host values that cross the worker pipes, as JSON-able values: the
requests a session sends its caller, the caller's answers, a session's settings, the
MCP servers a session is opened with (in their ACP shape), and the options a worker
builds its runtime from (on its command line: every ``RuntimeOptions`` field, read from
its declaration in ``hosting.options``, so a new option crosses without a change here).
Messages themselves (parts, prompts, turn results) are ``toolprep.messages.codec``'s.

Each ``dump_*`` has a ``load_*`` that rebuilds the same frozen value, or raises
``CodecError`` naming what it was given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, assert_never, get_args, get_origin

from toolprep.messages.codec import CodecError
from toolprep.messages.modes import check_mode
from toolprep.runtime.hosting.options import RuntimeField, RuntimeOptions, runtime_fields
from toolprep.runtime.kernel.session_host import (
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
from toolprep.runtime.mcp.specs import McpServerSpec, parse_servers, to_acp

__all__ = [
    "dump_answer",
    "dump_config",
    "dump_mcp_servers",
    "dump_options",
    "dump_request",
    "load_answer",
    "load_config",
    "load_mcp_servers",
    "load_options",
    "load_request",
]


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
            raise CodecError(f"not a client request: {raw!r}")


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
            raise CodecError(f"not an editor answer: {raw!r}")


def dump_mcp_servers(specs: Sequence[McpServerSpec]) -> list[dict[str, Any]]:
    return [to_acp(spec) for spec in specs]


def load_mcp_servers(raw: Any) -> tuple[McpServerSpec, ...]:
    try:
        return parse_servers(raw, field="mcp_servers")
    except ValueError as exc:
        raise CodecError(f"not MCP servers: {exc}") from None


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
                raise CodecError(f"not a session config: {exc}") from None
        case _:
            raise CodecError(f"not a session config: {raw!r}")


def _optional_int(value: Any) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise CodecError(f"expected a whole number or null, not {value!r}")


def dump_options(options: RuntimeOptions) -> dict[str, Any]:
    """Every field of ``options`` (``runtime_fields``), as JSON: a list for a tuple, a
    value's own options form for a value (``McpPolicy.to_options``)."""
    return {
        declared.name: _dump_option(declared, getattr(options, declared.name))
        for declared in runtime_fields()
    }


def load_options(raw: Any) -> RuntimeOptions:
    """The options ``dump_options`` wrote, each checked against its declared type."""
    declared_fields = runtime_fields()
    if not isinstance(raw, dict) or raw.keys() != {declared.name for declared in declared_fields}:
        raise CodecError(f"not runtime options: {raw!r}")
    return RuntimeOptions(
        **{
            declared.name: _load_option(declared, raw[declared.name])
            for declared in declared_fields
        }
    )


def _dump_option(declared: RuntimeField, value: Any) -> Any:
    if value is None or declared.kind in _SCALARS or get_origin(declared.kind) is Literal:
        return value
    if declared.is_list:
        return list(value)
    return value.to_options()  # a value with an options form (McpPolicy)


_SCALARS: tuple[type, ...] = (bool, int, float, str)


def _load_option(declared: RuntimeField, value: Any) -> Any:
    name, kind = declared.name, declared.kind
    if value is None and declared.optional:
        return None
    if declared.is_list:
        if not isinstance(value, list):
            raise CodecError(f"runtime option {name} cannot be {value!r}")
        if not all(isinstance(item, str) for item in value):
            raise CodecError(f"runtime option {name} names its items as text, not {value!r}")
        return tuple(value)
    if kind in _SCALARS or get_origin(kind) is Literal:
        if not _is_scalar(kind, value):
            raise CodecError(f"runtime option {name} cannot be {value!r}")
        return value
    try:
        return kind.from_options(value)  # a value with an options form (McpPolicy)
    except ValueError as exc:
        raise CodecError(f"runtime option {name}: {exc}") from None


def _is_scalar(kind: Any, value: Any) -> bool:
    """Whether ``value`` is JSON of ``kind``: a bool only for a bool, any number for a float."""
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, int | float)
    if get_origin(kind) is Literal:
        return value in get_args(kind)
    return isinstance(value, kind)
