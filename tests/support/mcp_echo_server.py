"""A small real MCP server for the tests, built with the official SDK (``MCPServer``).

Run as ``python -m tests.support.mcp_echo_server`` (stdio, what the agent
launches for an ``McpServerStdio``), or with ``--http PORT-FILE`` /
``--sse PORT-FILE`` to serve Streamable HTTP / SSE on a free loopback port
whose number it writes to PORT-FILE. ``--tag WORD`` is ignored: it marks
the process so a test can find it in the process table.

Its tools cover what the agent must handle: an answer (``echo``), a
read-only probe (``env_has``, ``environ``, ``pid``), a process that dies mid-call
(``crash``) and one that does not answer in time (``sleep``).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("echo")

READ_ONLY = ToolAnnotations(read_only_hint=True)


@server.tool(description="Return the text it is given, prefixed with 'echo: '.")
def echo(text: str) -> str:
    return f"echo: {text}"


@server.tool(description="Whether an environment variable is set.", annotations=READ_ONLY)
def env_has(name: str) -> str:
    return f"{name} is {'set' if name in os.environ else 'not set'}"


@server.tool(
    description="This server's whole environment, NAME=value per line.", annotations=READ_ONLY
)
def environ() -> str:
    return "\n".join(f"{name}={value}" for name, value in sorted(os.environ.items()))


@server.tool(description="This server's process id.", annotations=READ_ONLY)
def pid() -> str:
    return str(os.getpid())


@server.tool(description="Exit the server process at once with the given code.")
def crash(code: int = 1) -> str:
    sys.stderr.flush()
    os._exit(code)


@server.tool(description="Sleep for the given seconds, then answer.", annotations=READ_ONLY)
def sleep(seconds: float) -> str:
    time.sleep(seconds)
    return f"slept {seconds:g} s"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def main(argv: list[str]) -> None:
    if len(argv) >= 2 and argv[0] == "--tag":
        argv = argv[2:]
    if len(argv) == 2 and argv[0] in ("--http", "--sse"):
        port = _free_port()
        # Written before serving: the test polls the port until it accepts.
        Path(argv[1]).write_text(f"{port}\n")
        if argv[0] == "--http":
            server.run("streamable-http", host="127.0.0.1", port=port)
        else:
            server.run("sse", host="127.0.0.1", port=port)
        return
    server.run()


if __name__ == "__main__":
    main(sys.argv[1:])
