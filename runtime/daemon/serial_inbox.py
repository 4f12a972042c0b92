"""One connection's incoming messages, handled in order on a pool every connection shares.

The daemon's connections live on an event loop, which must never block, and
the JSON-RPC handlers may (a store query, a session load). Giving each
connection a thread of its own would make threads grow with connections;
instead each connection has an inbox, and whenever it holds messages one
task of a shared, bounded pool drains it: messages of one connection are
handled one at a time and in arrival order (``session/cancel`` after its
``session/prompt``), connections run side by side up to the pool's size.
A task hands its thread back after ``_BATCH`` messages, so a chatty
connection cannot keep a pool thread from the others.

The loop learns when an inbox is full (``full``) and stops reading that
connection's socket until ``room`` is set: a client that sends faster than
its messages are handled is slowed down, not buffered without end.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Final, Generic, TypeVar

__all__ = ["SerialInbox"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_BATCH: Final = 16
MAX_WAITING: Final = 64
"""Messages of one connection waiting to be handled before its socket is read no further."""


class SerialInbox(Generic[T]):
    """``put`` from the event loop; ``handle`` runs on ``pool``, one message at a time."""

    def __init__(
        self,
        pool: Executor,
        handle: Callable[[T], None],
        loop: asyncio.AbstractEventLoop,
        *,
        max_waiting: int = MAX_WAITING,
    ) -> None:
        self._pool = pool
        self._handle = handle
        self._loop = loop
        self._max_waiting = max_waiting
        self._lock = threading.Lock()
        self._waiting: collections.deque[T] = collections.deque()
        self._draining = False
        self._last: Callable[[], None] | None = None
        self._done: Future[None] = Future()
        self.room = asyncio.Event()  # set while the inbox may take more; loop side only
        self.room.set()

    def put(self, item: T) -> None:
        """Queue ``item``; clears ``room`` when the inbox is full (the caller then waits)."""
        with self._lock:
            self._waiting.append(item)
            if len(self._waiting) >= self._max_waiting:
                self.room.clear()
            self._start_locked()

    def close(self, last: Callable[[], None]) -> Future[None]:
        """Run ``last`` on the pool once every queued message is handled; done after it."""
        with self._lock:
            self._last = last
            self._start_locked()
        return self._done

    def _start_locked(self) -> None:
        if self._draining:
            return
        self._draining = True
        self._pool.submit(self._drain)

    def _drain(self) -> None:
        for _ in range(_BATCH):
            with self._lock:
                if not self._waiting:
                    break
                item = self._waiting.popleft()
                freed = len(self._waiting) == self._max_waiting // 2
            if freed:
                with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                    self._loop.call_soon_threadsafe(self.room.set)
            try:
                self._handle(item)
            except Exception:
                logger.exception("a message handler failed")
        with self._lock:
            if self._waiting:  # more to do: back to the pool's queue, behind the others
                self._pool.submit(self._drain)
                return
            last, self._last = self._last, None
            self._draining = False
            if last is None:
                return
            self._draining = True  # nothing may start after the last call
        try:
            last()
        except Exception:
            logger.exception("closing a connection failed")
        finally:
            self._done.set_result(None)
