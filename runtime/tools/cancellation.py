"""A cancel flag that also wakes whoever is blocked on a reply.

Tools poll ``is_set()`` between units of work and wait on it between polls, as with any
``threading.Event``. A tool blocked on an answer from elsewhere (the editor's permission
reply) registers that future here instead: setting the flag cancels it, so the wait ends at
once rather than at the next poll.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any


class CancelEvent(threading.Event):
    def __init__(self) -> None:
        super().__init__()
        self._guard = threading.Lock()
        self._waiting: set[Future[Any]] = set()

    def set(self) -> None:
        super().set()
        with self._guard:
            waiting, self._waiting = self._waiting, set()
        for future in waiting:
            future.cancel()

    def cancel_with(self, future: Future[Any]) -> None:
        """Cancel ``future`` when this fires (at once if it already has).

        The done callback is added outside the guard: for a future that is
        already done it runs at once, on this thread, and takes the guard.
        """
        with self._guard:
            armed = not self.is_set()
            if armed:
                self._waiting.add(future)
        if not armed:
            future.cancel()
            return
        future.add_done_callback(self._forget)

    def _forget(self, future: Future[Any]) -> None:
        with self._guard:
            self._waiting.discard(future)
