"""One MCP server of one session: started, listed, called, closed; all on the MCP loop.

The SDK's ``Client`` is entered and left by a single task (its task groups
must be), the *runner*: it connects, lists the tools, reports them, then
waits until the connection is closed. Calls are tasks of their own on the
same loop. Importing this module imports the SDK, so the hub imports it
only once a session names a server.

States::

    starting --listed--> ready --close()--> closed
        |                  |
        +--failed          +--the server process ended--> exited (calls fail at once)

A server's crash, as seen from a call: the connection ends, the call fails,
and the exit status (awaited briefly) names how it ended.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal, assert_never

from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import Implementation

from toolprep.runtime.mcp.config import McpConfig
from toolprep.runtime.mcp.guarded_http import public_only_client
from toolprep.runtime.mcp.mcp_compat import TransportStreams, sdk_http_client
from toolprep.runtime.mcp.results import to_output
from toolprep.runtime.mcp.specs import HttpServer, McpServerSpec, StdioServer
from toolprep.runtime.mcp.stdio import ServerProcess, describe_exit, stdio_transport
from toolprep.runtime.tools.base import ToolError, ToolOutput

logger = logging.getLogger(__name__)

State = Literal["starting", "ready", "failed", "exited", "closed"]

EXIT_STATUS_WAIT_S = 1.0
"""After a call lost its connection: how long to wait for the process's exit status."""

MAX_LIST_PAGES = 100
"""A server whose tool listing pages on for ever cannot hold the session's opening."""


class StartFailed(Exception):
    """The server could not be started, connected or listed; the message says why."""


@dataclass(frozen=True, slots=True)
class ListedTool:
    """One tool as the server lists it, in plain data."""

    name: str
    title: str | None
    description: str
    input_schema: dict[str, Any]
    read_only: bool


@dataclass(frozen=True, slots=True)
class Listing:
    """The tools a server listed, at most ``max_tools``; ``cut`` if it listed more."""

    tools: list[ListedTool]
    cut: bool


class McpConnection:
    """``spec`` connected for one session; ``on_process(pid, live)`` hears of its process."""

    def __init__(
        self,
        spec: McpServerSpec,
        *,
        cwd: str,
        environment: Mapping[str, str],
        config: McpConfig,
        on_process: Callable[[int, bool], None] | None = None,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.state: State = "starting"
        self.process: ServerProcess | None = None
        if isinstance(spec, StdioServer):
            self.process = ServerProcess(
                [spec.command, *spec.args],
                env=environment,
                cwd=cwd,
                grace_s=config.stop_grace_s,
                on_change=on_process,
                sandbox=config.sandbox,
            )
        self._config = config
        self._client: Client | None = None
        self._runner: asyncio.Task[None] | None = None
        self._closing: asyncio.Event | None = None

    # --- opening ---------------------------------------------------------------------------

    async def open(self) -> Listing:
        """Connect and list the tools; ``StartFailed`` names why not."""
        listed: asyncio.Future[Listing] = asyncio.get_running_loop().create_future()
        self._closing = asyncio.Event()
        self._runner = asyncio.create_task(self._run(listed), name=f"mcp-{self.name}")
        return await listed

    async def _run(self, listed: asyncio.Future[Listing]) -> None:
        assert self._closing is not None
        try:
            # No SDK read timeout: the hub bounds the start and each tool bounds its call,
            # and both name the server in the message when time runs out.
            client = Client(
                self._transport(),
                cache=None,
                client_info=Implementation(name="toolprep", version="1"),
            )
            async with client:
                tools = await _list_tools(client, self._config.max_tools)
                self._client = client
                self._set("ready")
                listed.set_result(tools)
                await self._closing.wait()
        except Exception as exc:
            if not listed.done():
                self._set("failed")
                listed.set_exception(StartFailed(self._why(exc)))
            elif self.state != "closed":
                logger.warning("MCP server %r: the connection ended: %s", self.name, exc)
        finally:
            self._client = None
            if not listed.done():  # cancelled while starting
                self._set("failed")
                listed.set_exception(StartFailed("closed before it was ready"))
            if self.state == "ready":
                self._set("exited")

    def _transport(self) -> AbstractAsyncContextManager[TransportStreams]:
        spec = self.spec
        match spec:
            case StdioServer():
                assert self.process is not None
                return stdio_transport(
                    self.process, max_message_bytes=self._config.max_message_bytes
                )
            case HttpServer(transport="sse"):
                factory = sdk_http_client if self._any_address else public_only_client
                headers = dict(spec.headers)
                return sse_client(spec.url, headers=headers, httpx_client_factory=factory)
            case HttpServer():
                return _streamable_http(spec.url, dict(spec.headers), self._any_address)
            case _:
                assert_never(spec)

    @property
    def _any_address(self) -> bool:
        """Whether the policy lets HTTP servers be on any address (else: public ones only)."""
        return self._config.policy.any_address

    def _why(self, exc: BaseException) -> str:
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:  # a task group's
            exc = exc.exceptions[0]
        process = self.process
        if process is not None and process.returncode is not None:
            return f"the process exited ({describe_exit(process.returncode)}) before it was ready"
        starting = process is not None and process.pid is None
        if isinstance(exc, OSError) and isinstance(self.spec, StdioServer) and starting:
            return f"cannot start {self.spec.command!r}: {exc.strerror or exc}"
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__

    def _set(self, state: State) -> None:
        if self.state != "closed":
            self.state = state

    # --- calling ---------------------------------------------------------------------------

    async def call(self, tool: str, args: dict[str, Any]) -> ToolOutput:
        """Call ``tool``; ``ToolError`` says how the server failed it."""
        client = self._client
        gone = self._ended()
        if client is None or gone is not None:
            raise ToolError(f"MCP server '{self.name}' is not running ({gone or self.state})")
        try:
            result = await client.call_tool(tool, args)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            process = self.process
            if process is not None:
                code = await process.wait_exit(EXIT_STATUS_WAIT_S)
                if code is not None:
                    self._set("exited")
                    raise ToolError(
                        f"MCP server '{self.name}' exited ({describe_exit(code)}) during the call"
                    ) from None
            failure = self._config.environment.mask(str(exc))
            raise ToolError(f"MCP server '{self.name}' failed the call: {failure}") from None
        return to_output(
            result.model_dump(by_alias=True, mode="json", exclude_none=True),
            server=self.name,
            tool=tool,
            max_chars=self._config.max_output_chars,
            mask=self._config.environment.mask,
        )

    def _ended(self) -> str | None:
        process = self.process
        if process is not None and process.returncode is not None:
            return f"it exited ({describe_exit(process.returncode)})"
        return None

    # --- closing ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Close the connection and stop the server; returns once its process is gone."""
        self.state = "closed"
        if self._closing is not None:
            self._closing.set()
        runner = self._runner
        if runner is None:
            return
        if not runner.done() and self._client is None:
            runner.cancel()  # still starting: nothing to wind down politely
        await asyncio.wait({runner})


async def _list_tools(client: Client, max_tools: int) -> Listing:
    """The first ``max_tools`` tools; the pages after the one that passes it are not asked for."""
    tools: list[ListedTool] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        for tool in page.tools:
            if len(tools) == max_tools:
                return Listing(tools, cut=True)
            annotations = tool.annotations
            tools.append(
                ListedTool(
                    name=tool.name,
                    title=tool.title or (annotations.title if annotations else None),
                    description=tool.description or "",
                    input_schema=dict(tool.input_schema),
                    read_only=bool(annotations and annotations.read_only_hint),
                )
            )
        cursor = page.next_cursor
        if cursor is None:
            break
    return Listing(tools, cut=False)


@asynccontextmanager
async def _streamable_http(
    url: str, headers: dict[str, str], any_address: bool
) -> AsyncIterator[TransportStreams]:
    client = sdk_http_client if any_address else public_only_client
    async with (
        client(headers=headers) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams
