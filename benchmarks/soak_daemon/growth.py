"""Growth after warm-up, as ratios, and the soak's targets judged on them.

A ratio compares the median of a window of samples with the median of an earlier one,
so one sample caught mid-burst (or just after a worker was killed and replaced) does
not decide it. ``since_warmup`` is the end window over the one right after warm-up;
``last_half`` the end window over the one at the middle of the time after warm-up.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.soak_daemon.meter import Sample

__all__ = ["FLAT", "Bounds", "Growth", "Verdict", "growth", "increase", "judge"]

FLAT = (
    "front_rss_mib",
    "oldest_worker_rss_mib",
    "front_threads",
    "workers_threads",
    "front_fds",
    "workers_fds",
)
"""What must stay flat after warm-up (the issue's target: growth <= 5 % over the last half).
The workers' RSS is judged on the oldest worker's: their sum drops at each kill."""

REPORTED = (*FLAT, "workers_rss_mib", "db_kib", "wal_kib", "send_buffer_kib", "sessions_live")
"""What the ratios are printed for (the store and the gauges are reported, not judged)."""

WINDOW_SHARE = 0.1
"""Each window spans this share of the time after warm-up (at least ``MIN_WINDOW`` samples)."""
MIN_WINDOW = 3


@dataclass(frozen=True)
class Growth:
    """One series: its median at warm-up's end, at the middle and at the end, and the ratios."""

    start: float
    middle: float
    end: float

    @property
    def since_warmup(self) -> float:
        return _ratio(self.end, self.start)

    @property
    def last_half(self) -> float:
        return _ratio(self.end, self.middle)


def _ratio(end: float, start: float) -> float:
    if start <= 0:
        return 1.0 if end <= 0 else float("inf")
    return end / start


def _window(samples: Sequence[Sample], begin: float, length: int, name: str) -> float:
    """Median of ``name`` over the ``length`` samples from the first at or after ``begin``."""
    first = next((i for i, s in enumerate(samples) if s.at >= begin), len(samples) - length)
    first = max(0, min(first, len(samples) - length))
    return statistics.median(s.row()[name] for s in samples[first : first + length])


def growth(samples: Sequence[Sample], warmup_end: float, workers: int) -> dict[str, Growth]:
    """Each ``REPORTED`` series' growth over the samples taken after ``warmup_end`` s with
    all ``workers`` running (one taken while a killed worker was being replaced compares
    nothing)."""
    after = [s for s in samples if s.at >= warmup_end and s.workers >= workers]
    if len(after) < 3 * MIN_WINDOW:
        raise ValueError(
            f"{len(after)} samples after warm-up; the ratios need {3 * MIN_WINDOW} "
            "(sample more often or run longer)"
        )
    length = max(MIN_WINDOW, round(len(after) * WINDOW_SHARE))
    middle_at = (after[0].at + after[-1].at) / 2
    return {
        name: Growth(
            start=_window(after, after[0].at, length, name),
            middle=_window(after, middle_at, length, name),
            end=_window(after, after[-1].at + 1, length, name),
        )
        for name in REPORTED
    }


def increase(values: Sequence[float]) -> float:
    """How much a counter rose over ``values``, counting a drop as a restart from zero (as
    Prometheus's ``increase`` does): a worker's counters start afresh when it is replaced."""
    total = 0.0
    for before, after in itertools.pairwise(values):
        total += after - before if after >= before else after
    return total


@dataclass(frozen=True)
class Bounds:
    """The targets: flat series' last-half growth, the WAL's largest size, and what must be
    gone once every client closed (live sessions, attached clients, open connections)."""

    max_growth: float = 1.05
    wal_limit_mib: float = 64.0


@dataclass(frozen=True)
class Verdict:
    """The targets missed (empty: every one met), each as a sentence."""

    missed: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.missed


def judge(
    ratios: dict[str, Growth],
    samples: Sequence[Sample],
    warmup_end: float,
    left: dict[str, float],
    bounds: Bounds,
) -> Verdict:
    """Which targets the run missed; ``left`` is the daemon's gauges after the last close."""
    missed = [
        f"{name} grew {ratios[name].last_half:.3f}x over the last half "
        f"({ratios[name].middle:.1f} -> {ratios[name].end:.1f}; bound {bounds.max_growth}x)"
        for name in FLAT
        if ratios[name].last_half > bounds.max_growth
    ]
    wal_peak = max((s.wal_kib for s in samples if s.at >= warmup_end), default=0.0) / 1024
    if wal_peak > bounds.wal_limit_mib:
        missed.append(f"the WAL reached {wal_peak:.1f} MiB (bound {bounds.wal_limit_mib} MiB)")
    missed.extend(
        f"{name} is {value:g} after every client closed (expected 0)"
        for name, value in left.items()
        if value != 0
    )
    return Verdict(tuple(missed))
