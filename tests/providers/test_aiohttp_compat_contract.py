"""The contract of ``runtime/providers/aiohttp_compat.py`` with the installed aiohttp.

Checked on a real connection to a loopback server that sends a chunked body one chunk
at a time when the test says so: the read timer the compat module switches off is the
one aiohttp re-arms per read, the byte count it reads is the body's, and failing the
body makes its reads raise. An aiohttp upgrade that changes one fails here, naming
aiohttp and its version, instead of as a stream that is timed out twice or never.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

from tests.support.contract import broken
from toolprep.runtime.providers.aiohttp_compat import (
    body_bytes_received,
    fail_body,
    stop_read_timer,
)

COMPAT = "runtime/providers/aiohttp_compat.py"
SOCK_READ_S = 1234.5  # recognisable among the loop's timers; never reached
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


class _TimerCountingLoop(asyncio.SelectorEventLoop):
    """Records the timers armed with the read timeout's delay (through public loop API)."""

    def __init__(self) -> None:
        super().__init__()
        self.read_timers: list[asyncio.TimerHandle] = []

    def call_later(  # type: ignore[override]
        self, delay: float, callback: Callable[..., object], *args: Any, context: Any = None
    ) -> asyncio.TimerHandle:
        handle = super().call_later(delay, callback, *args, context=context)
        if delay == SOCK_READ_S:
            self.read_timers.append(handle)
        return handle


@asynccontextmanager
async def _chunked_server() -> AsyncIterator[tuple[str, asyncio.Queue[bytes]]]:
    """A server answering one request with a chunked body; each item put is one chunk,
    ``b""`` ends the body."""
    chunks: asyncio.Queue[bytes] = asyncio.Queue()
    writers: list[asyncio.StreamWriter] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await reader.readuntil(b"\r\n\r\n")
        writer.write(HEAD)
        while chunk := await chunks.get():
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/", chunks
    finally:
        for writer in writers:
            writer.close()
        server.close()
        await server.wait_closed()


async def _read(response: aiohttp.ClientResponse, nbytes: int) -> bytes:
    data = b""
    while len(data) < nbytes:
        data += await response.content.readany()
    return data


async def _exercise(loop: _TimerCountingLoop) -> None:
    timeout = aiohttp.ClientTimeout(total=None, sock_read=SOCK_READ_S)
    async with (
        _chunked_server() as (url, chunks),
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(url) as response,
    ):
        chunks.put_nowait(b"first")
        assert await _read(response, 5) == b"first"
        armed_while_on = list(loop.read_timers)
        assert armed_while_on, broken(
            "aiohttp", COMPAT, "no read timer is armed per read: the contract test sees nothing"
        )
        assert body_bytes_received(response) == 5, broken(
            "aiohttp", COMPAT, "StreamReader.total_bytes does not count the body's bytes"
        )

        stop_read_timer(response)
        chunks.put_nowait(b"second")
        assert await _read(response, 6) == b"second"

        assert loop.read_timers == armed_while_on, broken(
            "aiohttp", COMPAT, "a read re-armed the timer after read_timeout was set to None"
        )
        assert all(handle.cancelled() for handle in loop.read_timers), broken(
            "aiohttp", COMPAT, "the timer armed before read_timeout was set to None still runs"
        )
        assert body_bytes_received(response) == 11, broken(
            "aiohttp", COMPAT, "StreamReader.total_bytes stopped counting with the timer off"
        )

        stalled = aiohttp.SocketTimeoutError("stalled")
        fail_body(response, stalled)
        try:
            await response.content.readany()
        except aiohttp.SocketTimeoutError as raised:
            assert raised is stalled, broken(
                "aiohttp", COMPAT, f"a failed body raised {raised!r}, not the error it was given"
            )
        else:
            raise AssertionError(
                broken("aiohttp", COMPAT, "StreamReader.set_exception did not fail the read")
            )
        chunks.put_nowait(b"")


def test_the_read_timer_the_byte_count_and_the_failure_are_what_aiohttp_uses() -> None:
    with asyncio.Runner(loop_factory=_TimerCountingLoop) as runner:
        loop = runner.get_loop()
        assert isinstance(loop, _TimerCountingLoop)
        runner.run(_exercise(loop))
