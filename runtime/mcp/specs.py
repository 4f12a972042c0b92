"""The MCP servers a client hands ``session/new`` / ``session/load``, as plain data.

ACP describes each server as ``McpServerStdio`` (``name``, ``command``,
``args``, ``env``: a list of ``{name, value}``) or, tagged with ``type``,
``McpServerHttp`` / ``McpServerSse`` (``name``, ``url``, ``headers``). The
specs are frozen values so they can cross a worker pipe (the ACP shape is
also the wire shape: ``to_acp`` and ``parse_servers`` are inverse) and be
kept by a routing front to reopen a session on a replacement worker.

Each server gets an id usable inside a tool name (``mcp__<id>__<tool>``):
its name with every run of characters outside ``[A-Za-z0-9-]`` turned into
one ``_``. Two servers of one session whose ids coincide are refused, since
their tools could not be told apart.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, assert_never

__all__ = [
    "HttpServer",
    "McpServerSpec",
    "StdioServer",
    "parse_servers",
    "server_id",
    "to_acp",
]

_ID_UNSAFE = re.compile(r"[^A-Za-z0-9-]+")
MAX_SERVER_ID_CHARS = 24
"""Room left in a 64-character tool name for ``mcp__``, ``__`` and the tool's own name."""


@dataclass(frozen=True, slots=True)
class StdioServer:
    """A server the agent starts as a process and talks to over its stdin and stdout."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    def __repr__(self) -> str:  # env values may be tokens: never in a log line
        return f"StdioServer({self.name!r}, {self.command!r}, args={list(self.args)!r})"


@dataclass(frozen=True, slots=True)
class HttpServer:
    """A running server reached over Streamable HTTP (``http``) or the older SSE transport."""

    name: str
    url: str
    transport: Literal["http", "sse"] = "http"
    headers: tuple[tuple[str, str], ...] = ()

    def __repr__(self) -> str:  # headers may carry credentials
        return f"HttpServer({self.name!r}, {self.url!r}, transport={self.transport!r})"


McpServerSpec = StdioServer | HttpServer


def server_id(name: str) -> str:
    """The server's part of its tools' names (``_meta.serverId`` on their cards)."""
    return _ID_UNSAFE.sub("_", name).strip("_")[:MAX_SERVER_ID_CHARS].strip("_")


def parse_servers(raw: Any, *, field: str = "mcpServers") -> tuple[McpServerSpec, ...]:
    """The specs in an ACP ``mcpServers`` array; ``ValueError`` names the field at fault."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValueError(f"'{field}' must be an array")
    specs = tuple(_parse_one(item, f"{field}[{index}]") for index, item in enumerate(raw))
    seen: dict[str, str] = {}
    for spec in specs:
        key = server_id(spec.name)
        if not key:
            raise ValueError(f"MCP server name {spec.name!r} has no letter or digit to name it by")
        if key in seen:
            raise ValueError(
                f"MCP servers {seen[key]!r} and {spec.name!r} would share the tool prefix "
                f"'mcp__{key}__'; give them distinct names"
            )
        seen[key] = spec.name
    return specs


def _parse_one(item: Any, where: str) -> McpServerSpec:
    if not isinstance(item, dict):
        raise ValueError(f"'{where}' must be an object")
    kind = item.get("type")
    name = _string(item, "name", where)
    match kind:
        case None | "stdio":
            args = item.get("args", [])
            if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                raise ValueError(f"'{where}.args' must be an array of strings")
            return StdioServer(
                name=name,
                command=_string(item, "command", where),
                args=tuple(args),
                env=_pairs(item.get("env", []), f"{where}.env"),
            )
        case "http" | "sse":
            return HttpServer(
                name=name,
                url=_string(item, "url", where),
                transport=kind,
                headers=_pairs(item.get("headers", []), f"{where}.headers"),
            )
        case _:
            raise ValueError(f"'{where}.type' must be 'http' or 'sse' (or absent for stdio)")


def _string(item: Mapping[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"'{where}.{key}' must be a non-empty string")
    return value


def _pairs(raw: Any, where: str) -> tuple[tuple[str, str], ...]:
    """ACP's ``[{"name": ..., "value": ...}]`` lists (``EnvVariable``, ``HttpHeader``)."""
    if not isinstance(raw, list):
        raise ValueError(f"'{where}' must be an array")
    pairs: list[tuple[str, str]] = []
    for index, entry in enumerate(raw):
        if not isinstance(entry, dict):
            raise ValueError(f"'{where}[{index}]' must be an object")
        pairs.append(
            (_string(entry, "name", f"{where}[{index}]"), _value(entry, f"{where}[{index}]"))
        )
    return tuple(pairs)


def _value(entry: Mapping[str, Any], where: str) -> str:
    value = entry.get("value")
    if not isinstance(value, str):
        raise ValueError(f"'{where}.value' must be a string")
    return value


def to_acp(spec: McpServerSpec) -> dict[str, Any]:
    """``spec`` in its ACP shape (what ``parse_servers`` reads back)."""
    match spec:
        case StdioServer(name=name, command=command, args=args, env=env):
            return {
                "name": name,
                "command": command,
                "args": list(args),
                "env": [{"name": k, "value": v} for k, v in env],
            }
        case HttpServer(name=name, url=url, transport=transport, headers=headers):
            return {
                "type": transport,
                "name": name,
                "url": url,
                "headers": [{"name": k, "value": v} for k, v in headers],
            }
        case _:
            assert_never(spec)
