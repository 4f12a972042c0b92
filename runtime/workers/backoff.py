"""When a worker slot whose worker keeps dying is started again, and what to say meanwhile.

A worker that dies once is replaced at once: its sessions move over and the user sees one
lost turn. One that dies again soon after (a bad install, a crash on start, a machine out
of memory) would otherwise be restarted in a tight loop, each start costing a core for a
second or two; so each further crash in a row doubles the wait before the next start, up
to a cap. A worker that stays up for ``reset_after`` seconds starts the count afresh.
While a slot waits, ``SlotHealth.describe`` says why nothing serves there, for the
error ``session/new`` answers when no slot has a worker.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["RestartBackoff", "SlotHealth"]


@dataclass(frozen=True, slots=True)
class RestartBackoff:
    """The waits before restarting a slot's worker: none after a first crash, then
    ``first_delay``, doubling with each crash in a row, at most ``max_delay``."""

    first_delay: float = 1.0
    max_delay: float = 30.0
    reset_after: float = 30.0
    """A worker up this long before it died counts as a first crash again."""

    def __post_init__(self) -> None:
        if not 0 <= self.first_delay <= self.max_delay:
            raise ValueError(
                f"restart back-off needs 0 <= first_delay <= max_delay, not "
                f"{self.first_delay} and {self.max_delay}"
            )
        if self.reset_after < 0:
            raise ValueError(f"reset_after must be >= 0 seconds, not {self.reset_after}")

    def delay(self, crashes: int) -> float:
        """The wait before restarting after the ``crashes``-th crash in a row."""
        if crashes <= 1:
            return 0.0
        return min(self.max_delay, self.first_delay * 2.0 ** (crashes - 2))


@dataclass(slots=True)
class SlotHealth:
    """One slot's crashes in a row and, while it waits, when it starts again.

    Guarded by the front's lock; times are ``time.monotonic()`` seconds.
    """

    crashes: int = 0
    first_crash_at: float = 0.0
    last_end: str = ""
    restart_at: float | None = None

    def crashed(self, now: float, up_for: float, how: str, policy: RestartBackoff) -> float:
        """Count a worker that ended ``how`` after ``up_for`` seconds; the wait before the
        next start."""
        if not self._in_a_row(up_for, policy):
            self.crashes, self.first_crash_at = 0, now
        self.crashes += 1
        self.last_end = how
        return policy.delay(self.crashes)

    def next_wait(self, up_for: float, policy: RestartBackoff) -> float:
        """The wait ``crashed`` will give a worker that ended after ``up_for`` seconds and
        is not counted yet: what a call the death interrupted is told to wait."""
        return policy.delay(self.crashes + 1 if self._in_a_row(up_for, policy) else 1)

    def _in_a_row(self, up_for: float, policy: RestartBackoff) -> bool:
        """Whether a worker up ``up_for`` seconds died soon enough to add to the count."""
        return self.crashes > 0 and up_for < policy.reset_after

    def describe(self, slot: int, now: float) -> str:
        """Why ``slot`` serves nothing now, e.g. ``worker 1 exited with status 3
        (3 times in 10 s); next restart in 8 s``.

        A slot with no crash counted is between a worker's end and its count (or
        starting for the first time): it is said to be starting, not to have died
        "0 times".
        """
        if self.crashes == 0:
            return f"worker {slot} is starting"
        times = "once" if self.crashes == 1 else f"{self.crashes} times"
        span = math.ceil(max(0.0, now - self.first_crash_at))
        said = f"worker {slot} {self.last_end} ({times} in {span} s)"
        if self.restart_at is None:
            return f"{said}; restarting now"
        return f"{said}; next restart in {math.ceil(max(0.0, self.restart_at - now))} s"

    def retry_after(self, now: float) -> float:
        """Seconds until this slot starts again (0 while it is starting)."""
        return 0.0 if self.restart_at is None else max(0.0, self.restart_at - now)
