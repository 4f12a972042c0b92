"""MCP servers named by ``session/new`` / ``session/load``: their tools in the session.

``specs`` parses what the client sends (plain data, imported by the
session-host boundary, so this package's root stays light); ``hub.McpHub``
(one per runtime) starts each session's servers, keeps their tools as the
session's own registry and stops them with the session. The SDK is
imported only once a session names a server.
"""

from toolprep.runtime.mcp.config import McpConfig
from toolprep.runtime.mcp.specs import HttpServer, McpServerSpec, StdioServer, parse_servers

__all__ = ["HttpServer", "McpConfig", "McpServerSpec", "StdioServer", "parse_servers"]
