"""A stdio MCP server: its process, and the SDK transport over its pipes.

The SDK's own ``stdio_client`` starts the server through asyncio's
subprocess support and keeps the process to itself. This module starts it
with ``subprocess`` instead, for three things the runtime needs: the pid
(the server leads its own process group, which the host kills on a forced
exit and a worker's front kills should the worker die), the exit status
(a crash mid-call is reported as "exited (code 1)", not as a closed
connection), and no thread per server (the exit is noticed through a pidfd
on the MCP loop; see ``runtime.mcp.loop``). What it yields is the SDK's
``Transport`` shape, so everything above the pipes is the SDK's.

Stopping follows the MCP lifecycle: stdin is closed, the server gets
``grace_s`` to exit, then its group gets SIGTERM and, ``grace_s`` later,
SIGKILL. The shutdown runs shielded, so a cancelled session cannot leave
a server running.

What a server starts can leave its group (``setsid``, a double fork), so
the server runs as a child subreaper (``runtime.tools.process_tree``):
every process it started stays its descendant while it runs. Stopping
notes those descendants before stdin is closed and before each signal,
and SIGKILLs whichever of them outlived the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from toolprep.runtime.tools.process_groups import signal_group
from toolprep.runtime.tools.process_tree import (
    descendants,
    end_tree,
    executable_or_raise,
    subreaper_argv,
)
from toolprep.runtime.tools.sandbox import Sandbox

if TYPE_CHECKING:
    from toolprep.runtime.mcp.mcp_compat import TransportStreams

logger = logging.getLogger(__name__)

_POLL_S = 0.1


def describe_exit(returncode: int) -> str:
    """``code 1`` or ``killed by signal SIGKILL``, for messages about a server that ended."""
    if returncode >= 0:
        return f"code {returncode}"
    try:
        return f"killed by signal {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


class ServerProcess:
    """One server process; ``start`` and everything after it run on the MCP loop."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        grace_s: float,
        on_change: Callable[[int, bool], None] | None = None,
        sandbox: Sandbox | None = None,
    ) -> None:
        """``on_change(pid, live)`` hears when the process starts and when it is gone."""
        self.argv = list(argv)
        self.sandbox = sandbox
        self.on_change = on_change
        self.env = dict(env)
        self.cwd = cwd
        self.grace_s = grace_s
        self.popen: subprocess.Popen[bytes] | None = None
        self.exited = asyncio.Event()
        self._poller: asyncio.Task[None] | None = None
        self._descendants: dict[int, str] = {}

    @property
    def pid(self) -> int | None:
        return None if self.popen is None else self.popen.pid

    @property
    def returncode(self) -> int | None:
        return None if self.popen is None else self.popen.returncode

    def start(self) -> None:
        """Start the server in a process group of its own; ``OSError`` if it cannot run."""
        executable_or_raise(self.argv[0], cwd=self.cwd, env=self.env)
        argv = subreaper_argv(self.argv)
        if self.sandbox is not None:
            argv = self.sandbox.wrap(argv, cwd=self.cwd)
        self.popen = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=self.cwd,
            env=self.env,
            start_new_session=True,
            bufsize=0,
        )
        if self.on_change is not None:
            self.on_change(self.popen.pid, True)
        loop = asyncio.get_running_loop()
        try:
            pidfd = os.pidfd_open(self.popen.pid)
        except (AttributeError, OSError):  # not Linux, or a kernel before 5.3
            self._poller = loop.create_task(self._poll())
        else:
            loop.add_reader(pidfd, self._on_pidfd, pidfd)

    def _on_pidfd(self, pidfd: int) -> None:
        assert self.popen is not None
        if self.popen.poll() is None:
            return
        asyncio.get_running_loop().remove_reader(pidfd)
        os.close(pidfd)
        self.exited.set()

    async def _poll(self) -> None:
        assert self.popen is not None
        while self.popen.poll() is None:
            await asyncio.sleep(_POLL_S)
        self.exited.set()

    async def wait_exit(self, timeout: float) -> int | None:
        """The exit status once the process has ended, or None if it runs ``timeout`` on."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.exited.wait(), timeout)
        return self.returncode

    def note_descendants(self) -> None:
        """Remember the processes the server started, while it still runs to find them by."""
        if self.popen is not None and self.popen.poll() is None:
            self._descendants.update(descendants(self.popen.pid))

    async def stop_after_stdin_closed(self) -> None:
        """Give the server ``grace_s`` to exit on its own, then SIGTERM, then SIGKILL;
        then SIGKILL what it started, in its group or out of it."""
        if self.popen is None:
            return
        pid = self.popen.pid
        for signum in (signal.SIGTERM, signal.SIGKILL):
            if await self.wait_exit(self.grace_s) is not None:
                break
            self.note_descendants()
            signal_group(pid, signum)
        if await self.wait_exit(self.grace_s) is None:
            logger.warning("MCP server process %d survived SIGKILL; abandoning it", pid)
        # Whatever the server left in its group goes with it, and so does what left the group.
        signal_group(pid, signal.SIGKILL)
        end_tree(self._descendants)
        if self._poller is not None:
            self._poller.cancel()
        if self.on_change is not None:
            self.on_change(pid, False)

    def kill_now(self) -> None:
        """SIGKILL the server's group; safe from a signal handler or another thread."""
        pid = self.pid
        if pid is not None:
            signal_group(pid, signal.SIGKILL)


@asynccontextmanager
async def stdio_transport(
    process: ServerProcess, *, max_message_bytes: int
) -> AsyncIterator[TransportStreams]:
    """Start ``process`` and yield the SDK's read and write streams over its pipes.

    A message longer than ``max_message_bytes`` ends the connection (the
    session's pending requests fail), since one line cannot be skipped
    without reading it whole.
    """
    import anyio
    from mcp.shared.message import SessionMessage
    from mcp.types import jsonrpc_message_adapter

    process.start()
    popen = process.popen
    assert popen is not None and popen.stdin is not None and popen.stdout is not None
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=max_message_bytes, loop=loop)
    read_pipe, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader, loop=loop), popen.stdout
    )
    write_pipe, write_protocol = await loop.connect_write_pipe(
        lambda: asyncio.streams.FlowControlMixin(loop=loop), popen.stdin
    )
    writer = asyncio.StreamWriter(write_pipe, write_protocol, None, loop)
    read_in, read_out = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_in, write_out = anyio.create_memory_object_stream[SessionMessage](0)

    async def from_server() -> None:
        async with read_in:
            while True:
                try:
                    line = await reader.readline()
                except ValueError:
                    logger.error(
                        "MCP server process %d sent a message over %d bytes; disconnecting",
                        popen.pid,
                        max_message_bytes,
                    )
                    return
                if not line:
                    return
                if not line.strip():
                    continue
                item: SessionMessage | Exception
                try:
                    item = SessionMessage(jsonrpc_message_adapter.validate_json(line))
                except ValueError as exc:
                    item = exc
                try:
                    await read_in.send(item)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return

    async def to_server() -> None:
        try:
            async with write_out:
                async for message in write_out:
                    json = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    writer.write(json.encode() + b"\n")
                    await writer.drain()
        except (OSError, anyio.ClosedResourceError, anyio.BrokenResourceError):
            # The server stopped reading: let the session see the connection end.
            await read_in.aclose()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(from_server)
        tasks.start_soon(to_server)
        try:
            yield read_out, write_in
        finally:
            with anyio.CancelScope(shield=True):
                await _close(process, writer, read_pipe, (read_out, write_in))
            tasks.cancel_scope.cancel()


async def _close(
    process: ServerProcess,
    writer: asyncio.StreamWriter,
    read_pipe: asyncio.ReadTransport,
    streams: tuple[Any, ...],
) -> None:
    for stream in streams:
        await stream.aclose()
    process.note_descendants()  # before the server can exit and leave them to init
    writer.close()  # the server's stdin: a well-behaved server exits on its end
    await process.stop_after_stdin_closed()
    read_pipe.close()
