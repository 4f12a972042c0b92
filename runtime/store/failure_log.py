"""``FailureLog``: store failures logged once per cause per interval, with counts.

A bad or full disk fails every write the journal makes, and a busy daemon
makes thousands a minute: one line per lost record buries the log and says
less than a count. So the first failure of a cause (per kind of write) is
logged at ERROR as it is, and the ones that follow within ``interval_s`` are
only counted; the count is logged in one line (``store: 1,234 frame writes
failed in the last 30 s: the disk is full``) by the first failure
after the interval, or by ``flush``. A cause that stays quiet for a whole
interval is logged in full again the next time it happens.

The clock is read through ``time.monotonic`` at each call (or the ``clock``
given), so a test can move it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["DEFAULT_INTERVAL_S", "FailureLog"]

DEFAULT_INTERVAL_S = 30.0


@dataclass(slots=True)
class _Window:
    started: float
    counted: int = 0


class FailureLog:
    """Thread-safe; one per writer whose failures it reports."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.logger = logger
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._windows: dict[tuple[str, str], _Window] = {}

    def failed(self, kind: str, cause: str, message: str) -> None:
        """A write of ``kind`` (``frame``, ``history``) failed for ``cause`` (what SQLite
        said); ``message`` says what was lost."""
        now = self._now()
        key = (kind, cause)
        with self._lock:
            due = self._close_windows(now)
            window = self._windows.get(key)
            first = window is None
            if window is None:
                self._windows[key] = _Window(now)
            else:
                window.counted += 1
        self._log_summaries(due)
        if first:
            self.logger.error(
                "store: %s (further failures of this cause are counted for %g s)",
                message,
                self.interval_s,
            )

    def flush(self) -> None:
        """Log the counts not logged yet, whatever the time (at the writer's end)."""
        now = self._now()
        with self._lock:
            due = self._close_windows(now, every=True)
        self._log_summaries(due)

    def _now(self) -> float:
        return self._clock() if self._clock is not None else time.monotonic()

    def _close_windows(
        self, now: float, *, every: bool = False
    ) -> list[tuple[tuple[str, str], int, float]]:
        """With the lock held: end the windows past their interval (``every`` one: all).

        A window that counted failures goes on at ``now`` (the cause is still failing,
        so its next failure is counted, not logged in full); an empty one is dropped,
        and so is every one that ``every`` ends.
        """
        due = []
        for key, window in list(self._windows.items()):
            elapsed = now - window.started
            if elapsed < self.interval_s and not every:
                continue
            if window.counted:
                due.append((key, window.counted, elapsed))
            if window.counted and not every:
                self._windows[key] = _Window(now)
            else:
                del self._windows[key]
        return due

    def _log_summaries(self, due: list[tuple[tuple[str, str], int, float]]) -> None:
        for (kind, cause), count, span in due:
            noun = "write" if count == 1 else "writes"
            self.logger.error(
                "store: %s %s %s failed in the last %.0f s: %s",
                f"{count:,}",
                kind,
                noun,
                span,
                cause,
            )
