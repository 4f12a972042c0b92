"""``McpTool``: one tool of a session's MCP server, as the executor runs any tool.

Permission: a tool the server annotates ``readOnlyHint: true`` runs without
asking; any other asks the client first, as ``run_shell_command`` does
without ``--allow-shell`` (there is no flag that pre-approves MCP tools: a
server is code the editor's user configured, but what its tools do is
only known from its own description). The hint is the server's word, which
is why only the harmless direction (skip a question) depends on it. The
session's mode (``messages.modes``) may still let a call run without asking
(``auto``) or refuse one the hint does not call read-only (``plan``).

The call itself runs on the MCP loop; this worker thread waits for it,
bounded by the MCP call timeout (and below the executor's own tool
timeout, so the card says which server did not answer). A cancelled turn
cancels the waiting call at once.
"""

from __future__ import annotations

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
    def read_only(self) -> bool:
        """The server's ``readOnlyHint``: what plan mode lets run."""
        return self.listed.read_only

    def needs_permission(self, args: Mapping[str, Any]) -> bool:
        return not self.listed.read_only

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
