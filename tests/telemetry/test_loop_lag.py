"""The loop-lag probe: a loop held by one callback reports the hold as lag."""

from __future__ import annotations

import asyncio
import queue
import threading
import time

from toolprep.runtime.kernel.loop_lag import watch_loop_lag


def test_a_held_loop_reports_at_least_the_hold() -> None:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    reports: queue.Queue[float] = queue.Queue()
    try:
        watch_loop_lag(loop, reports.put, interval=0.05)
        loop.call_soon_threadsafe(time.sleep, 0.3)  # right after the probe is set: holds it
        held = reports.get(timeout=10)
        assert held >= 0.25 - 1e-3
        assert reports.get(timeout=10) >= 0.0  # and it goes on sampling
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
