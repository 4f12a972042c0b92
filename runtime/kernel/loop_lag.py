"""How late an event loop runs what is due: the lag every stream or connection on it feels.

A probe asks the loop to call it back ``interval`` seconds later, notes how much later than
that it ran, and asks again. A loop held by one heavy callback (a large write, a slow
decode) shows as lag for everything else on it. Started only when someone listens (an
observer other than ``NO_OBSERVER``), so a runtime without telemetry never wakes for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

__all__ = ["LAG_PROBE_INTERVAL_S", "watch_loop_lag"]

LAG_PROBE_INTERVAL_S: Final = 1.0


def watch_loop_lag(
    loop: asyncio.AbstractEventLoop,
    report: Callable[[float], None],
    interval: float = LAG_PROBE_INTERVAL_S,
) -> None:
    """From any thread: every ``interval`` s, ``report`` (on the loop's thread) how many
    seconds late the loop ran a callback due then. Ends with the loop."""

    def schedule() -> None:
        due = loop.time() + interval
        loop.call_at(due, tick, due)

    def tick(due: float) -> None:
        report(max(0.0, loop.time() - due))
        schedule()

    loop.call_soon_threadsafe(schedule)
