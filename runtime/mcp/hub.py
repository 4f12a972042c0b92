"""``McpHub``: the MCP servers of every session of one runtime.

Opening a session with servers starts them all at once on the MCP loop
(``runtime.mcp.loop``) and waits, at most ``start_timeout_s`` for all of
them together, until each has listed its tools; those become the
session's own tool registry (``mcp__<server id>__<tool>``), beside the
runtime's shared built-ins. A server that cannot be started, connected or
listed in time is left out: the session opens without its tools, and a
warning naming the server and why is logged. One broken entry in an
editor's configuration thus costs its tools, not the session. A server
listing more than ``max_tools`` tools gets only the first ones offered:
each tool is declared in every model request of the session, so thousands
would slow every turn. That is logged, and said once more to the user, at
the start of the session's first turn (``notes``).

Closing the session (``session/close``, the end of the connection, the
runtime's shutdown) stops its servers: stdin closed, then SIGTERM and
SIGKILL to their process groups if they linger, then SIGKILL to whatever
they started that left their groups (``runtime.mcp.stdio``). Every stdio server's group
is also tracked in ``processes``, so that a forced exit (``kill_now``) or
a worker's front, should the worker die, can kill them.

Stdio servers get the agent's environment without its secrets
(``EnvironmentPolicy``, as for shell commands), plus the ``env`` entries the
client gave for that server as given (a token the server needs comes that
way), except any whose value is the provider's key or the serve token.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from toolprep.runtime.mcp.config import McpConfig
from toolprep.runtime.mcp.loop import McpLoop
from toolprep.runtime.mcp.names import tool_name
from toolprep.runtime.mcp.specs import McpServerSpec, StdioServer, server_id
from toolprep.runtime.tools.base import Tool
from toolprep.runtime.tools.process_groups import ProcessGroups
from toolprep.runtime.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from toolprep.runtime.mcp.connection import Listing, McpConnection

logger = logging.getLogger(__name__)

__all__ = ["McpHub"]


@dataclass(slots=True)
class _SessionServers:
    connections: list[McpConnection] = field(default_factory=list)
    tools: ToolRegistry = field(default_factory=ToolRegistry)
    notes: list[str] = field(default_factory=list)
    """What the user is told at the start of the session's next turn."""


class McpHub:
    """Per-session MCP servers; thread-safe (calls come from the host and tool workers)."""

    def __init__(self, config: McpConfig | None = None) -> None:
        self.config = config or McpConfig()
        self.loop = McpLoop()
        self.processes = ProcessGroups(self.config.stop_grace_s)
        self._lock = threading.Lock()
        self._sessions: dict[str, _SessionServers] = {}

    def check(self, specs: Sequence[McpServerSpec]) -> None:
        """Raise ``McpRefused`` if the policy does not allow one of ``specs``; starts nothing."""
        if specs:
            self.config.policy.check(specs)

    def open(self, session_id: str, cwd: str, specs: Sequence[McpServerSpec]) -> ToolRegistry:
        """Start ``specs`` for ``session_id``; returns the tools of those that came up."""
        if not specs:
            return ToolRegistry()
        from toolprep.runtime.mcp.connection import McpConnection  # imports the SDK

        servers = _SessionServers()
        pending: list[tuple[McpConnection, Future[Listing]]] = []
        for spec in specs:
            connection = McpConnection(
                spec,
                cwd=cwd,
                environment=self._environment(spec),
                config=self.config,
                on_process=self._tracker(session_id),
            )
            pending.append((connection, self.loop.submit(connection.open())))
        deadline = time.monotonic() + self.config.start_timeout_s
        for connection, opened in pending:
            try:
                listed = opened.result(max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                why = f"it did not list its tools within {self.config.start_timeout_s:g} s"
            except Exception as exc:
                why = str(exc) or type(exc).__name__
            else:
                servers.connections.append(connection)
                self._register(servers.tools, connection, listed)
                if listed.cut:
                    servers.notes.append(self._cut(session_id, connection.name))
                continue
            logger.warning(
                "MCP server %r left out of session %s: %s; the session opens without its tools",
                connection.name,
                session_id,
                why,
            )
            self._close_later([connection])
        with self._lock:
            self._sessions[session_id] = servers
        return servers.tools

    def _cut(self, session_id: str, server: str) -> str:
        limit = self.config.max_tools
        logger.warning(
            "MCP server %r lists more than %d tools; only the first %d are offered to "
            "session %s (--max-mcp-tools)",
            server,
            limit,
            limit,
            session_id,
        )
        return (
            f"Note: MCP server '{server}' lists more than {limit} tools; only the first "
            f"{limit} are offered to the model (the agent's --max-mcp-tools).\n\n"
        )

    def take_notes(self, session_id: str) -> list[str]:
        """What the session's user has yet to be told about its servers; each note once."""
        with self._lock:
            servers = self._sessions.get(session_id)
            if servers is None or not servers.notes:
                return []
            notes, servers.notes = servers.notes, []
        return notes

    def _register(self, registry: ToolRegistry, connection: McpConnection, listed: Listing) -> None:
        from toolprep.runtime.mcp.tool import McpTool

        prefix = server_id(connection.name)
        for item in listed.tools:
            name = tool_name(prefix, item.name)
            if name in registry:
                logger.warning(
                    "MCP server %r: tool %r left out, its name %s is taken",
                    connection.name,
                    item.name,
                    name,
                )
                continue
            registry.register(McpTool(name, item, connection, self.loop, self.config))

    def _environment(self, spec: McpServerSpec) -> dict[str, str]:
        policy = self.config.environment
        environment = policy.environment()
        if isinstance(spec, StdioServer):
            for name, value in spec.env:
                if value in policy.pinned:
                    logger.warning(
                        "MCP server %r: env %s left out, its value is a provider credential "
                        "or the serve token",
                        spec.name,
                        name,
                    )
                    continue
                environment[name] = value
        return environment

    def _tracker(self, session_id: str) -> Callable[[int, bool], None]:
        def changed(pid: int, live: bool) -> None:
            if live:
                self.processes.add(session_id, pid)
            else:
                self.processes.discard(session_id, pid)

        return changed

    def tool(self, session_id: str, name: str) -> Tool | None:
        """The session's MCP tool called ``name``, if it has one."""
        with self._lock:
            servers = self._sessions.get(session_id)
        return None if servers is None else servers.tools.get(name)

    def close(self, session_id: str) -> Future[None] | None:
        """Stop the session's servers; the future resolves once they are gone."""
        with self._lock:
            servers = self._sessions.pop(session_id, None)
        if servers is None or not servers.connections:
            return None
        return self._close_later(servers.connections)

    def _close_later(self, connections: list[McpConnection]) -> Future[None] | None:
        async def close_all() -> None:
            import asyncio

            await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)

        try:
            return self.loop.submit(close_all())
        except RuntimeError:  # stopped: shutdown killed every group already
            return None

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop every session's servers (within ``timeout``), then the loop."""
        with self._lock:
            sessions = list(self._sessions)
        closing = [f for f in (self.close(s) for s in sessions) if f is not None]
        deadline = time.monotonic() + timeout
        for future in closing:
            try:
                future.result(max(0.0, deadline - time.monotonic()))
            except Exception as exc:
                logger.warning("closing MCP servers at shutdown: %r", exc)
        self.processes.kill_now()  # what did not stop in time
        if self.loop.started:
            self.loop.stop()

    def kill_now(self) -> None:
        """SIGKILL every server process at once; safe to call from a signal handler."""
        self.processes.kill_now()
