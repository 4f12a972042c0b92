"""The shared timer thread: actions run in time order, cancelled ones never run or linger."""

from __future__ import annotations

import functools
import threading

from toolprep.runtime.kernel.scheduler import Scheduler


def test_actions_run_in_due_order() -> None:
    scheduler = Scheduler()
    ran: list[str] = []
    done = threading.Event()

    def late() -> None:
        ran.append("late")
        done.set()

    scheduler.call_later(0.06, late)
    scheduler.call_later(0.01, lambda: ran.append("early"))
    assert done.wait(2)
    assert ran == ["early", "late"]
    scheduler.stop()


def test_cancelled_timers_never_run_and_release_their_actions() -> None:
    scheduler = Scheduler()
    fired: list[int] = []
    handles = [scheduler.call_later(60, functools.partial(fired.append, n)) for n in range(10_000)]
    for handle in handles:
        handle.cancel()
    assert scheduler.pending == 0
    assert len(scheduler._heap) <= 64  # compacted: no closure kept for a timer that won't run
    done = threading.Event()
    scheduler.call_later(0.01, done.set)
    assert done.wait(2)
    assert fired == []
    scheduler.stop()


def test_a_timer_due_after_the_earliest_still_runs_in_its_turn() -> None:
    """Adding one due later does not wake the thread; it runs once the earlier ones have."""
    scheduler = Scheduler()
    ran: list[str] = []
    done = threading.Event()

    def last() -> None:
        ran.append("third")
        done.set()

    scheduler.call_later(0.02, lambda: ran.append("first"))
    scheduler.call_later(0.05, lambda: ran.append("second"))
    scheduler.call_later(0.08, last)
    assert done.wait(2)
    assert ran == ["first", "second", "third"]
    scheduler.stop()
