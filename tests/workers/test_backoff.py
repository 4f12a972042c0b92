"""The waits before a slot's worker starts again, and what is said meanwhile."""

from __future__ import annotations

import pytest

from toolprep.runtime.workers.backoff import RestartBackoff, SlotHealth

POLICY = RestartBackoff(first_delay=1.0, max_delay=30.0, reset_after=30.0)


def test_the_first_crash_restarts_at_once_then_the_wait_doubles_up_to_the_cap() -> None:
    health = SlotHealth()
    waits = [health.crashed(float(n), 0.5, "exited with status 3", POLICY) for n in range(9)]
    assert waits == [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]


def test_a_worker_that_stayed_up_starts_the_count_afresh() -> None:
    health = SlotHealth()
    for n in range(4):
        health.crashed(float(n), 0.5, "exited with status 3", POLICY)
    assert health.crashed(100.0, 30.0, "exited with status 3", POLICY) == 0.0
    assert health.crashes == 1
    assert health.crashed(101.0, 1.0, "exited with status 3", POLICY) == 1.0


def test_the_wait_is_described_as_the_user_reads_it() -> None:
    health = SlotHealth()
    for at in (0.0, 4.0, 9.5):
        wait = health.crashed(at, 0.5, "exited with status 3", POLICY)
    health.restart_at = 9.5 + wait
    assert health.describe(1, 9.5) == (
        "worker 1 exited with status 3 (3 times in 10 s); next restart in 2 s"
    )
    assert health.retry_after(9.5) == 2.0
    health.restart_at = None
    assert health.describe(1, 12.0).endswith("; restarting now")
    assert health.retry_after(12.0) == 0.0


def test_a_slot_with_no_crash_counted_is_said_to_be_starting() -> None:
    assert SlotHealth().describe(0, 32051.0) == "worker 0 is starting"


@pytest.mark.parametrize(
    ("first", "cap", "reset"), [(-1.0, 30.0, 30.0), (40.0, 30.0, 30.0), (1.0, 30.0, -1.0)]
)
def test_nonsense_back_off_is_refused(first: float, cap: float, reset: float) -> None:
    with pytest.raises(ValueError, match=r"back-off|reset_after"):
        RestartBackoff(first_delay=first, max_delay=cap, reset_after=reset)


def test_a_call_a_death_interrupted_is_told_the_wait_that_death_will_earn() -> None:
    health = SlotHealth()
    assert health.next_wait(0.5, POLICY) == 0.0  # a first crash restarts at once
    for n in range(3):
        health.crashed(float(n), 0.5, "exited with status 3", POLICY)
    assert health.next_wait(0.5, POLICY) == 4.0  # the fourth in a row
    assert health.next_wait(30.0, POLICY) == 0.0  # up long enough: a first crash again
    assert health.crashed(3.0, 0.5, "exited with status 3", POLICY) == 4.0
