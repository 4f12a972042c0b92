"""Counts kept by the runtime and read by an observable counter when a reader collects.

The SDK's ``Counter.add`` turns its attributes into a key, finds the stream and takes
its lock on every call: several microseconds, on the roles' threads, for each card and
attempt. A tally costs a lock and a dictionary increment; the SDK reads the running
totals only when a scrape or an export collects (``observations``), which is what an
observable counter is for. The exported counter is the same: a monotonic sum, by the
same attributes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from opentelemetry.metrics import CallbackOptions, Observation

__all__ = ["Tallies"]

Key = tuple[tuple[str, str], ...]


class Tallies:
    """Running totals by attribute set; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[Key, int] = {}

    def add(self, key: Key) -> None:
        """Count one of ``key`` (its attributes as name-value pairs, in a fixed order)."""
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1

    def observations(self, _: CallbackOptions) -> Iterable[Observation]:
        """The totals so far, for the observable counter's callback."""
        with self._lock:
            counts = list(self._counts.items())
        return [Observation(count, dict(key)) for key, count in counts]
