"""One JSON-RPC message per WebSocket text frame (ACP's remote transport, ``toolprep serve``).

Writes never block the caller on the network. A session's frames are
written by the thread that serves every session of a runtime, so a client
that stops reading must not stall the others: messages go to a queue that a
sender thread drains, and a client that lets the queue grow past
``max_queued_bytes`` is disconnected (close code 1008) rather than buffered
without end. Its sessions live on in the daemon; it can reconnect and load
them. A message over ``max_message_bytes`` from the client closes the
connection with code 1009, which is what the WebSocket protocol defines for
it (the websockets library enforces the limit before reading the message).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Final

import orjson
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode
from websockets.sync.connection import Connection

from toolprep.runtime.acp.transport import SkippedMessage

__all__ = ["DEFAULT_MAX_QUEUED_BYTES", "WebSocketTransport"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_QUEUED_BYTES: Final = 64 * 1024 * 1024


class WebSocketTransport:
    def __init__(
        self,
        socket: Connection,
        max_message_bytes: int,
        *,
        max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES,
    ) -> None:
        self._socket = socket
        self.max_message_bytes = max_message_bytes
        self._max_queued = max_queued_bytes
        self._queue: collections.deque[bytes] = collections.deque()
        self._queued_bytes = 0
        self._failure: str | None = None
        self._closing = False
        self._ready = threading.Condition()
        self._sender = threading.Thread(
            target=self._send_loop, name="toolprep-ws-sender", daemon=True
        )
        self._sender.start()

    def incoming(self) -> Iterator[bytes | SkippedMessage]:
        while True:
            try:
                message = self._socket.recv(decode=False)
            except ConnectionClosed:
                return
            yield message

    def encode(self, message: Mapping[str, Any]) -> bytes:
        return orjson.dumps(message)

    def write(self, data: bytes) -> None:
        with self._ready:
            if self._failure is not None:
                raise BrokenPipeError(self._failure)
            if self._queued_bytes + len(data) > self._max_queued:
                self._failure = (
                    f"the client fell {self._queued_bytes + len(data)} bytes behind "
                    f"(limit {self._max_queued}) and was disconnected"
                )
                self._closing = True
                self._queue.clear()
                self._ready.notify()
                raise BrokenPipeError(self._failure)
            was_empty = not self._queue
            self._queue.append(data)
            self._queued_bytes += len(data)
            if was_empty:  # else the sender is awake and will find it: no wake-up per message
                self._ready.notify()

    def close_output(self) -> None:
        """Send what is queued, then close; returns at once (the sender finishes it)."""
        with self._ready:
            if self._failure is None:
                self._failure = "connection closed"
            self._closing = True
            self._ready.notify()

    def _send_loop(self) -> None:
        while True:
            with self._ready:
                while not self._queue and not self._closing:
                    self._ready.wait()
                batch = list(self._queue)
                self._queue.clear()
                self._queued_bytes = 0
                closing = self._closing
                too_slow = closing and self._failure not in (None, "connection closed")
            try:
                for data in batch:
                    self._socket.send(data, text=True)
            except ConnectionClosed as exc:
                with self._ready:
                    self._failure = f"the client is gone: {exc}"
                    self._queue.clear()
                return
            if closing:
                code = CloseCode.POLICY_VIOLATION if too_slow else CloseCode.NORMAL_CLOSURE
                reason = "client too slow: output queue limit" if too_slow else ""
                with contextlib.suppress(Exception):
                    self._socket.close(code, reason)
                if too_slow:
                    logger.warning("%s", self._failure)
                return
