"""``McpTool``: one tool of a session's MCP server, as the executor runs any tool.

Permission: a tool asks the client first, as ``run_shell_command`` does
in ask mode, unless it is read-only. The only word on that is the server's
``readOnlyHint``, and MCP says a hint from a server one does not trust must
not be relied on: a tool may claim to read and run a shell command that
writes. So the hint counts only for a server the user named with
``--trust-mcp-server NAME`` (the name the client's ``mcpServers`` entry
gives it). A tool of a trusted server that says it is read-only runs
without asking and runs in plan mode; any other tool asks (ask,
accept_edits) and is refused in plan mode, with a card that names the
option when the tool claimed to be read-only. ``auto`` runs everything.

The call itself runs on the MCP loop; this worker thread waits for it,
bounded by the MCP call timeout (and below the executor's own tool
timeout, so the card says which server did not answer). A cancelled turn
cancels the waiting call at once.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from concurrent.futures import CancelledError
from pathlib import Path
from typing import Any

from toolprep.runtime.mcp.config import McpConfig
from toolprep.runtime.mcp.connection import ListedTool, McpConnection
from toolprep.runtime.mcp.loop import McpLoop
from toolprep.runtime.tools.base import ToolContext, ToolError, ToolKind, ToolOutput
from toolprep.runtime.tools.permissions import ensure_permission

EXECUTOR_MARGIN_S = 1.0
"""How far below the executor's tool timeout an MCP call gives up, so this message wins."""


class McpTool:
    """Satisfies ``runtime.tools.base.Tool``; named ``mcp__<server id>__<tool>``."""

    kind: ToolKind = "other"

    def __init__(
        self,
        name: str,
        listed: ListedTool,
        connection: McpConnection,
        loop: McpLoop,
        config: McpConfig,
    ) -> None:
        self.name = name
        self.listed = listed
        self.description = listed.description or f"{listed.name} (MCP server {connection.name})"
        self.parameters: dict[str, Any] = _object_schema(listed.input_schema)
        self._connection = connection
        self._loop = loop
        self._config = config

    @property
    def server(self) -> str:
        return self._connection.name

    def title(self, args: Mapping[str, Any]) -> str:
        return f"{self.server}: {self.listed.title or self.listed.name}"

    def locations(self, args: Mapping[str, Any], cwd: Path) -> list[dict[str, Any]]:
        return []

    @property
    def trusted(self) -> bool:
        """Whether the user vouched for this tool's server (``--trust-mcp-server``)."""
        return self.server in self._config.trusted_servers

    @property
    def read_only(self) -> bool:
        """The server's ``readOnlyHint`` if the server is trusted, else False: what plan
        mode lets run and ask mode runs without asking."""
        return self.listed.read_only and self.trusted

    @property
    def read_only_unverified(self) -> str | None:
        """Why a tool that says it is read-only is not treated so, or None if it says no
        such thing or its server is trusted; plan mode's refusal tells the user this."""
        if not self.listed.read_only or self.trusted:
            return None
        return (
            f"MCP server '{self.server}' says this tool only reads, but the agent does not "
            "take an untrusted server's word for that; if you trust that server, start the "
            f"agent with --trust-mcp-server {_quoted(self.server)} to let its read-only "
            "tools run in plan mode."
        )

    def needs_permission(self, args: Mapping[str, Any]) -> bool:
        return not self.read_only

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        title = self.title(args)
        if self.needs_permission(args):
            ensure_permission(ctx, tool_name=self.name, title=title, kind=self.kind, args=args)
        if ctx.cancelled.is_set():
            raise ToolError(f"{title}: cancelled")
        timeout = self._timeout(ctx)
        try:
            pending = self._loop.submit(self._connection.call(self.listed.name, dict(args)))
        except RuntimeError:
            raise ToolError(f"MCP server '{self.server}' is closed") from None
        ctx.cancelled.cancel_with(pending)
        try:
            return pending.result(timeout)
        except TimeoutError:
            pending.cancel()
            raise ToolError(
                f"MCP server '{self.server}' did not answer within {timeout:g} s"
            ) from None
        except CancelledError:
            raise ToolError(f"{title}: cancelled") from None

    def _timeout(self, ctx: ToolContext) -> float:
        timeout = self._config.call_timeout_s
        if ctx.timeout is not None and ctx.timeout > 2 * EXECUTOR_MARGIN_S:
            timeout = min(timeout, ctx.timeout - EXECUTOR_MARGIN_S)
        return timeout


def _quoted(name: str) -> str:
    """``name`` as a shell word: as it is when it is plain, else in single quotes."""
    return name if name and all(c.isalnum() or c in "-_." for c in name) else shlex.quote(name)


def _object_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The server's input schema as given; providers refuse a root that is not an object.

    MCP requires ``type: object`` at the root; a server that breaks that rule
    would make every model request of the session fail, so its tool takes
    any object instead and the server judges the arguments.
    """
    parameters = dict(schema)
    if parameters.setdefault("type", "object") != "object":
        return {"type": "object", "properties": {}}
    parameters.setdefault("properties", {})
    return parameters
