"""The daemon's own accept loop, so that running out of descriptors pauses accepting on any loop.

asyncio's server stops accepting for a second when ``accept`` fails with
EMFILE and tries again; uvloop's (libuv's) closes the listening socket for
good on the first such failure, and the daemon would go on running with no
way in. So the listening socket is the daemon's: ``Acceptor`` watches it
with ``add_reader`` (on either loop), accepts without blocking and hands
each socket to the loop (``connect_accepted_socket``), whose WebSocket
protocol takes it from there. When the process is out of descriptors (or
the kernel of buffers) it stops watching for ``PAUSE_S`` and reports it
through ``limits.AcceptErrors``: the waiting connections stay in the
kernel's backlog and are accepted once descriptors are free again.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable
from typing import Final

from toolprep.runtime.daemon.limits import OUT_OF_FILES, AcceptErrors

__all__ = ["PAUSE_S", "Acceptor", "listening_socket"]

logger = logging.getLogger(__name__)

PAUSE_S: Final = 1.0
"""How long accepting stops after the process ran out of descriptors (asyncio's own pause)."""

_ACCEPTS_PER_WAKE: Final = 128  # a burst is taken in a few rounds, not one loop turn per client
_GONE_BEFORE_ACCEPT: Final = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EPERM})


def listening_socket(host: str, port: int, backlog: int) -> socket.socket:
    """A non-blocking socket listening on ``host`` (a name, IPv4 or IPv6) and ``port``.

    On the first address ``host`` resolves to, as a URL naming it would reach.
    """
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    listener = socket.create_server((host, port), family=family, backlog=backlog)
    listener.setblocking(False)
    return listener


class Acceptor:
    """Accepts on ``listener`` (listening, non-blocking) for ``protocol_factory``'s protocols.

    Construct, ``start`` and ``close`` on the loop's thread.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        listener: socket.socket,
        protocol_factory: Callable[[], asyncio.Protocol],
    ) -> None:
        self._loop = loop
        self._listener = listener
        self._factory = protocol_factory
        self._errors = AcceptErrors()
        self._resume: asyncio.TimerHandle | None = None
        self._handing_over: set[asyncio.Task[object]] = set()
        self._closed = False

    def start(self) -> None:
        self._loop.add_reader(self._listener.fileno(), self._accept)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop accepting (the listening socket stays the caller's to close)."""
        if self._closed:
            return
        self._closed = True
        if self._resume is not None:
            self._resume.cancel()
        self._loop.remove_reader(self._listener.fileno())

    def _accept(self) -> None:
        for _ in range(_ACCEPTS_PER_WAKE):
            try:
                accepted, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _GONE_BEFORE_ACCEPT:
                    continue
                if exc.errno in OUT_OF_FILES:
                    self._errors.report(exc)
                else:
                    logger.warning("cannot accept connections: %s; again in %.0f s", exc, PAUSE_S)
                self._pause()
                return
            accepted.setblocking(False)
            self._hand_over(accepted)

    def _pause(self) -> None:
        self._loop.remove_reader(self._listener.fileno())
        self._resume = self._loop.call_later(PAUSE_S, self._unpause)

    def _unpause(self) -> None:
        self._resume = None
        if not self._closed:
            self.start()

    def _hand_over(self, accepted: socket.socket) -> None:
        task = self._loop.create_task(self._connect(accepted))
        self._handing_over.add(task)
        task.add_done_callback(self._handing_over.discard)

    async def _connect(self, accepted: socket.socket) -> object:
        try:
            return await self._loop.connect_accepted_socket(self._factory, accepted)
        except OSError as exc:  # the client left at once, or descriptors ran out for the loop
            accepted.close()
            if exc.errno in OUT_OF_FILES:
                self._errors.report(exc)
            else:
                logger.info("dropped an accepted connection: %s", exc)
            return None
