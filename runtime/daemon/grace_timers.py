"""The grace periods of the daemon's unattended sessions, on one thread.

A ``threading.Timer`` per session is a thread per session left without a
client: two thousand clients that prompt once and leave were two thousand
threads for ``--disconnect-grace`` seconds. Here every pending grace period
is an entry in one heap, and one thread sleeps until the earliest is due
and calls ``expire(key)`` for it. Cancelling only marks the entry, so a
restart of the same key's period never finds the old one.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["GraceTimers"]

logger = logging.getLogger(__name__)


@dataclass(order=True)
class _Entry:
    due: float
    order: int
    key: str = field(compare=False)
    cancelled: bool = field(default=False, compare=False)


class GraceTimers:
    """``start(key, delay)``: call ``expire(key)`` after ``delay`` s unless cancelled first."""

    def __init__(self, expire: Callable[[str], None], name: str = "toolprep-grace") -> None:
        self._expire = expire
        self._name = name
        self._changed = threading.Condition()
        self._heap: list[_Entry] = []
        self._pending: dict[str, _Entry] = {}
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False

    def __contains__(self, key: str) -> bool:
        with self._changed:
            return key in self._pending

    def start(self, key: str, delay: float) -> bool:
        """False if ``key`` already has a pending period, or the timers are shut down."""
        with self._changed:
            if self._closed or key in self._pending:
                return False
            entry = _Entry(time.monotonic() + delay, next(self._order), key)
            self._pending[key] = entry
            heapq.heappush(self._heap, entry)
            if self._thread is None:  # started on first use: a daemon without clients has none
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._changed.notify()
            return True

    def cancel(self, key: str) -> bool:
        """True if ``key`` had a pending period (it will not expire)."""
        with self._changed:
            entry = self._pending.pop(key, None)
            if entry is None:
                return False
            entry.cancelled = True
            return True

    def shutdown(self) -> None:
        """Cancel everything pending; the thread ends."""
        with self._changed:
            self._closed = True
            for entry in self._pending.values():
                entry.cancelled = True
            self._pending.clear()
            self._heap.clear()
            self._changed.notify()

    def _run(self) -> None:
        while True:
            with self._changed:
                key = self._next_due_locked()
                if key is None:
                    return
            try:
                self._expire(key)
            except Exception:
                logger.exception("the grace period of %s ended in an error", key)

    def _next_due_locked(self) -> str | None:
        """Wait for the earliest entry to be due and take it; None once shut down."""
        while not self._closed:
            while self._heap and self._heap[0].cancelled:
                heapq.heappop(self._heap)
            if not self._heap:
                self._changed.wait()
                continue
            wait = self._heap[0].due - time.monotonic()
            if wait > 0:
                self._changed.wait(wait)
                continue
            entry = heapq.heappop(self._heap)
            del self._pending[entry.key]
            return entry.key
        return None
