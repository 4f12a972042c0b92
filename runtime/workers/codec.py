"""The session-host values that cross the worker pipes, as JSON-able values: the
requests a session sends its caller, the caller's answers, a session's settings, the
MCP servers a session is opened with (in their ACP shape), and the options a worker
builds its runtime from (on its command line). Messages themselves
(parts, prompts, turn results) are ``toolprep.messages.codec``'s.

Each ``dump_*`` has a ``load_*`` that rebuilds the same frozen value, or raises
``CodecError`` naming what it was given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from types import NoneType
from typing import Any, assert_never

from toolprep.messages.codec import CodecError
from toolprep.messages.modes import check_mode
from toolprep.runtime.hosting.options import RuntimeOptions
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
from toolprep.runtime.mcp.policy import McpPolicy
from toolprep.runtime.mcp.specs import McpServerSpec, parse_servers, to_acp
from toolprep.runtime.store.connection import SYNCHRONOUS_LEVELS

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


_OPTION_KINDS: dict[str, tuple[type, ...]] = {
    "provider": (str, NoneType),
    "model": (str, NoneType),
    "fallback_model": (list,),
    "base_url": (str, NoneType),
    "max_retries": (int,),
    "max_retry_wait": (int, float),
    "max_sse_event_bytes": (int,),
    "context_window": (int, NoneType),
    "compact_at": (int, float),
    "replay": (str, NoneType),
    "allow_shell": (bool,),
    "mode": (str, NoneType),
    "scrub_env": (list,),
    "pass_env": (list,),
    "mcp_call_timeout": (int, float, NoneType),
    "max_mcp_tools": (int, NoneType),
    "trust_mcp_server": (list,),
    "sandbox": (str,),
    "sandbox_network": (bool,),
    "sandbox_limit": (list,),
    "log_level": (str,),
    "data_dir": (str, NoneType),
    "synchronous": (str,),
    "event_loop": (str,),
    "store_owner": (str, NoneType),
    "mcp_policy": (dict,),
}
"""The JSON kind of each ``RuntimeOptions`` field."""

_NAME_LISTS = ("fallback_model", "scrub_env", "pass_env", "trust_mcp_server", "sandbox_limit")


def dump_options(options: RuntimeOptions) -> dict[str, Any]:
    dumped = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
    for name in _NAME_LISTS:
        dumped[name] = list(dumped[name])
    dumped["mcp_policy"] = options.mcp_policy.to_options()
    return dumped


def load_options(raw: Any) -> RuntimeOptions:
    if not isinstance(raw, dict) or raw.keys() != _OPTION_KINDS.keys():
        raise CodecError(f"not runtime options: {raw!r}")
    for name, kinds in _OPTION_KINDS.items():
        value = raw[name]
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise CodecError(f"runtime option {name} cannot be {value!r}")
    lists = {name: tuple(raw[name]) for name in _NAME_LISTS}
    if not all(isinstance(item, str) for names in lists.values() for item in names):
        raise CodecError(
            f"runtime options name variables, models and MCP servers as text: {lists!r}"
        )
    if raw["synchronous"] not in SYNCHRONOUS_LEVELS:
        raise CodecError(f"runtime option synchronous cannot be {raw['synchronous']!r}")
    try:
        policy = McpPolicy.from_options(raw["mcp_policy"])
    except ValueError as exc:
        raise CodecError(str(exc)) from None
    return RuntimeOptions(**{**raw, **lists, "mcp_policy": policy})
