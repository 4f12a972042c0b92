"""One JSON-RPC message per WebSocket text frame (ACP's remote transport, ``toolprep serve``).

The socket lives on the daemon's event loop (the ``websockets`` asyncio
server); the frames are written by the runtime's threads, and the thread
that writes them serves every session of a runtime, so it must never wait
for one client. ``write`` appends to this connection's buffer and wakes
the loop (one ``call_soon_threadsafe`` per batch, not per frame); the loop
sends in order. Bytes count against ``max_buffered_bytes`` from ``write``
until the socket took them: a client that lets its buffer grow past the
limit is cut off at once: the writer gets ``BrokenPipeError``, the buffer
is dropped, and the loop sends close code 1008 with a reason, waits
``close_timeout`` for the client to read up to it, then drops the socket.
Its sessions stay with the daemon; it can reconnect and load them.

Incoming messages are read by the server (``recv`` on the loop) and pushed
to the JSON-RPC connection; ``incoming`` is not used here. A message over
``max_message_bytes`` from the client closes the connection with code
1009, which the websockets library enforces before reading the message.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final, Literal, assert_never

import orjson
from websockets.asyncio.connection import Connection
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from toolprep.runtime.acp.transport import SkippedMessage
from toolprep.runtime.acp.websockets_compat import abort

__all__ = [
    "CUT_OFF_REASON",
    "WebSocketTransport",
    "close_within",
]

logger = logging.getLogger(__name__)

CUT_OFF_REASON: Final = "client too slow: send buffer limit reached"

OutboxState = Literal["open", "closing", "cut_off", "gone"]
"""``open``: frames are taken; ``closing``: what is buffered goes out, then close;
``cut_off``: over the limit, closing with 1008; ``gone``: the socket is closed."""


async def close_within(socket: Connection, code: int, reason: str, timeout: float) -> bool:
    """Close handshake for at most ``timeout`` seconds, then drop the socket; True if clean.

    The library's ``close`` first waits for its close frame to be written,
    which never happens for a client that stopped reading: the deadline
    covers that wait too.
    """
    try:
        async with asyncio.timeout(timeout):
            await socket.close(code, reason)
    except TimeoutError:
        abort(socket)
        return False
    return True


class WebSocketTransport:
    """Built on the event loop that runs ``socket``; ``write`` from any thread."""

    def __init__(
        self,
        socket: Connection,
        max_message_bytes: int,
        *,
        max_buffered_bytes: int,
        close_timeout: float = 10.0,
        name: str = "ws",
    ) -> None:
        if max_buffered_bytes < 1:
            raise ValueError(f"max_buffered_bytes must be >= 1, got {max_buffered_bytes}")
        self._socket = socket
        self._loop = asyncio.get_running_loop()
        self.max_message_bytes = max_message_bytes
        self._max_buffered = max_buffered_bytes
        self._close_timeout = close_timeout
        self._name = name
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)  # the buffer shrank, or the state moved on
        self._queue: collections.deque[bytes] = collections.deque()
        self._buffered = 0  # queued plus being sent
        self._state: OutboxState = "open"
        self._failure = ""
        self._close_code: int = CloseCode.NORMAL_CLOSURE
        self._wake_pending = False
        self._ready = asyncio.Event()  # loop side: something to send, or a state to act on
        self._runner: asyncio.Task[Any] | None = None  # ``run``, cancelled by a cut-off

    @property
    def buffered_bytes(self) -> int:
        with self._lock:
            return self._buffered

    def incoming(self) -> Iterator[bytes | SkippedMessage]:
        raise TypeError(
            "a WebSocketTransport's messages are read on the event loop and handed to "
            "JsonRpcConnection.receive; it has no reader thread"
        )

    def encode(self, message: Mapping[str, Any]) -> bytes:
        return orjson.dumps(message)

    def write(self, data: bytes) -> None:
        """Buffer one frame; ``BrokenPipeError`` once closed or past the limit. Never waits."""
        self.write_many((data,))

    def write_many(self, messages: Sequence[bytes]) -> None:
        """Buffer each message as a frame of its own, waking the loop once; all or none of
        them, as ``write``."""
        with self._lock:
            match self._state:
                case "open":
                    pass
                case "closing" | "cut_off" | "gone":
                    raise BrokenPipeError(self._failure)
                case _:
                    assert_never(self._state)
            total = self._buffered + sum(map(len, messages))
            if total > self._max_buffered:
                self._state = "cut_off"
                self._failure = (
                    f"the client fell {total} bytes behind (limit {self._max_buffered}) "
                    "and was disconnected"
                )
                self._drop_buffer_locked()
                self._signal_locked(force=True, cut=True)
                raise BrokenPipeError(self._failure)
            self._queue.extend(messages)
            self._buffered = total
            self._signal_locked(force=False)

    def wait_for_room(self, nbytes: int, timeout: float) -> bool:
        """Wait until ``nbytes`` more fit in the buffer (or it is empty); False if they did
        not within ``timeout`` or the connection is no longer open.

        For a writer that may wait, such as a replay on the handler thread of
        the client that asked for it: it then paces itself to the client
        instead of overflowing the buffer and getting the client cut off.
        The runtime's frame writer never calls it.
        """
        with self._room:
            fits = self._room.wait_for(
                lambda: (
                    self._state != "open"
                    or self._buffered == 0
                    or self._buffered + nbytes <= self._max_buffered
                ),
                timeout,
            )
            return fits and self._state == "open"

    def close_output(self, code: int = CloseCode.NORMAL_CLOSURE) -> None:
        """Send what is buffered, then close with ``code``; returns at once."""
        with self._lock:
            if self._state != "open":
                return
            self._state = "closing"
            self._failure = "connection closed"
            self._close_code = code
            self._room.notify_all()
            self._signal_locked(force=True)

    def abort(self) -> None:
        """Drop the socket now (loop side), whatever is buffered."""
        with self._lock:
            if self._state in ("open", "closing"):
                self._failure = "connection dropped"
            self._state = "gone"
            self._drop_buffer_locked()
        abort(self._socket)

    def _drop_buffer_locked(self) -> None:
        """Forget what is buffered (the connection is over or cut off); a replay waiting for
        room wakes and finds the state changed."""
        self._queue.clear()
        self._buffered = 0
        self._room.notify_all()

    def _signal_locked(self, *, force: bool, cut: bool = False) -> None:
        """Wake the loop once per batch; a state change always wakes it."""
        if self._wake_pending and not force:
            return
        self._wake_pending = True
        try:
            self._loop.call_soon_threadsafe(self._wake, cut)
        except RuntimeError:  # the loop is closed: the daemon is stopping
            self._state = "gone"
            self._failure = "the daemon is stopping"
            self._drop_buffer_locked()

    def _wake(self, cut: bool) -> None:
        self._ready.set()
        if cut and self._runner is not None:
            self._runner.cancel()  # out of a send the client will never read

    async def run(self) -> None:
        """Send buffered frames until the connection closes; runs on the loop, one per socket."""
        runner = asyncio.current_task()
        self._runner = runner
        try:
            while await self._send_ready():
                pass
        except ConnectionClosed as exc:
            self._gone(f"the client is gone: {exc}")
        except asyncio.CancelledError:
            with self._lock:
                cut_off = self._state == "cut_off"
            if not cut_off or runner is None:
                raise
            runner.uncancel()
            self._runner = None
            await self._cut_off()
        finally:
            self._runner = None

    async def _send_ready(self) -> bool:
        """Send one batch, or act on a state change; False once there is no more to do."""
        await self._ready.wait()
        self._ready.clear()
        with self._lock:
            batch = list(self._queue)
            self._queue.clear()
            self._wake_pending = False
            state = self._state
        match state:
            case "open" | "closing":
                for data in batch:
                    await self._socket.send(data, text=True)
                    with self._lock:
                        if self._state in ("open", "closing"):
                            self._buffered -= len(data)
                            self._room.notify_all()
                if state == "closing":
                    await close_within(self._socket, self._close_code, "", self._close_timeout)
                    self._gone("connection closed")
                    return False
                return True
            case "cut_off":
                self._runner = None
                return await self._cut_off()
            case "gone":
                return False
            case _:
                assert_never(state)

    async def _cut_off(self) -> bool:
        with self._lock:
            failure = self._failure
        logger.warning("%s: %s; closing with 1008", self._name, failure)
        await close_within(
            self._socket, CloseCode.POLICY_VIOLATION, CUT_OFF_REASON, self._close_timeout
        )
        self._gone(failure)
        return False

    def _gone(self, failure: str) -> None:
        with self._lock:
            if self._state != "cut_off":
                self._failure = failure
            self._state = "gone"
            self._drop_buffer_locked()
