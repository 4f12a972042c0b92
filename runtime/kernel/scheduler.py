"""One timer thread for every delayed action in the runtime.

Backoff waits and tool timeouts are scheduled here instead of on a
``threading.Timer`` each, so the thread count stays constant however many
sessions are retrying at once. Most tool timeouts never fire (the tool
finishes first), so cancelling one drops its action at once and the heap is
compacted when cancelled entries dominate: a long-running daemon must not
accumulate closures for timers that will never run.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)


class TimerHandle:
    __slots__ = ("_key", "_scheduler")

    def __init__(self, scheduler: Scheduler, key: int) -> None:
        self._scheduler = scheduler
        self._key = key

    def cancel(self) -> None:
        self._scheduler._cancel(self._key)


class Scheduler:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._heap: list[tuple[float, int]] = []
        self._actions: dict[int, Callable[[], None]] = {}
        self._counter = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="toolprep-scheduler", daemon=True)
        self._thread.start()

    def call_later(self, delay: float, action: Callable[[], None]) -> TimerHandle:
        """Run ``action`` on the timer thread after ``delay`` seconds.

        The timer thread is woken only when the new timer is due before every
        other: it already sleeps until the earliest one, and a tool timeout,
        scheduled for every call, is nearly always due after those before it.
        """
        key = next(self._counter)
        with self._cond:
            self._actions[key] = action
            entry = (self._clock() + max(0.0, delay), key)
            heapq.heappush(self._heap, entry)
            if self._heap[0] is entry:
                self._cond.notify()
        return TimerHandle(self, key)

    def _cancel(self, key: int) -> None:
        with self._cond:
            if self._actions.pop(key, None) is None:
                return
            if len(self._heap) > 64 and len(self._actions) * 2 < len(self._heap):
                self._heap = [entry for entry in self._heap if entry[1] in self._actions]
                heapq.heapify(self._heap)

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._actions)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > self._clock()):
                    due = self._heap[0][0] - self._clock() if self._heap else None
                    self._cond.wait(timeout=None if due is None else max(0.0, due))
                if self._stopped:
                    return
                _, key = heapq.heappop(self._heap)
                action = self._actions.pop(key, None)
            if action is None:
                continue
            try:
                action()
            except Exception:
                logger.exception("scheduled action failed")

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._actions.clear()
            self._cond.notify()
        self._thread.join(timeout=2)
