"""One timer thread for every delayed action in the runtime.

Backoff waits and tool timeouts are scheduled here instead of on a
``threading.Timer`` each, so the thread count stays constant however many
sessions are retrying at once.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)


class Scheduler:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._counter = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="toolprep-scheduler", daemon=True)
        self._thread.start()

    def call_later(self, delay: float, action: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._heap, (self._clock() + max(0.0, delay), next(self._counter), action))
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > self._clock()):
                    timeout = None if not self._heap else max(0.0, self._heap[0][0] - self._clock())
                    self._cond.wait(timeout=min(timeout, 0.5) if timeout is not None else 0.5)
                if self._stopped:
                    return
                _, _, action = heapq.heappop(self._heap)
            try:
                action()
            except Exception:
                logger.exception("scheduled action failed")

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify()
        self._thread.join(timeout=2)
