"""How much work one glob or search call may do before it stops and reports.

A walk over a huge tree, or a search through gigabytes, is not wrong, only
unbounded; so rather than fail, the call stops where its budget runs out and
returns what it found with a note saying which budget ended it. The model
can then narrow the path or pattern. Cancellation is checked at the same
points, so a cancel is seen between two files or two blocks of one file.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Literal, assert_never

from toolprep.runtime.tools.base import ToolContext, ToolError
from toolprep.runtime.tools.config import ToolConfig

StopReason = Literal["entries", "bytes", "time"]

# When the executor's own timeout is the tighter bound, stop a little before
# it, so the partial result reaches the model instead of a timeout error.
_TIMEOUT_SHARE = 0.9


class WorkBudget:
    """Counters for one call, checked by the walk and by the search between units of work."""

    __slots__ = (
        "_cancelled",
        "_clock",
        "_deadline",
        "_started",
        "bytes_read",
        "entries",
        "max_bytes",
        "max_entries",
        "seconds",
        "stopped",
    )

    def __init__(
        self,
        *,
        max_entries: int,
        max_bytes: int,
        seconds: float,
        cancelled: threading.Event | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.seconds = seconds
        self.entries = 0
        self.bytes_read = 0
        self.stopped: StopReason | None = None
        self._cancelled = cancelled
        self._clock = clock
        self._started = clock()
        self._deadline = self._started + seconds

    @classmethod
    def for_call(cls, config: ToolConfig, ctx: ToolContext) -> WorkBudget:
        seconds = config.max_walk_seconds
        if ctx.timeout is not None:
            seconds = min(seconds, ctx.timeout * _TIMEOUT_SHARE)
        return cls(
            max_entries=config.max_walk_entries,
            max_bytes=config.max_search_bytes,
            seconds=seconds,
            cancelled=ctx.cancelled,
        )

    def visit(self) -> bool:
        """Count one walked file or directory; False once any budget is spent."""
        if not self.running():
            return False
        if self.entries >= self.max_entries:
            self.stopped = "entries"
            return False
        self.entries += 1
        return True

    def allowance(self, wanted: int) -> int:
        """How many of ``wanted`` bytes may still be read (0 once any budget is spent)."""
        if not self.running():
            return 0
        left = self.max_bytes - self.bytes_read
        if left <= 0:
            self.stopped = "bytes"
            return 0
        return min(wanted, left)

    def charge(self, count: int) -> None:
        """Record ``count`` bytes read."""
        self.bytes_read += count

    def running(self) -> bool:
        """False once a budget is spent or time is up; raises ToolError if cancelled."""
        if self._cancelled is not None and self._cancelled.is_set():
            raise ToolError("cancelled")
        if self.stopped is None and self._clock() >= self._deadline:
            self.stopped = "time"
        return self.stopped is None

    def note(self) -> str | None:
        """Why the call stopped early, for the model; None if it ran to completion."""
        reason = self.stopped
        if reason is None:
            return None
        match reason:
            case "entries":
                spent = (
                    f"stopped after visiting {self.entries} files and directories "
                    f"(budget of {self.max_entries} entries reached)"
                )
            case "bytes":
                spent = (
                    f"stopped after reading {_size(self.bytes_read)} "
                    f"(budget of {_size(self.max_bytes)} reached)"
                )
            case "time":
                elapsed = self._clock() - self._started
                spent = f"stopped after {elapsed:.1f}s (time budget of {self.seconds:g}s reached)"
            case _:
                assert_never(reason)
        return f"{spent}; results are partial, narrow the path or pattern"


def _size(count: int) -> str:
    if count < 1024 * 1024:
        return f"{count} bytes"
    return f"{count / (1024 * 1024):.1f} MiB"
