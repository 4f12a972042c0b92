"""The daemon's grace periods: one thread for any number of them, in due order, cancellable."""

from __future__ import annotations

import threading

from toolprep.runtime.daemon.grace_timers import GraceTimers

DEADLINE_S = 30.0


class _Expired:
    def __init__(self) -> None:
        self.keys: list[str] = []
        self._changed = threading.Condition()

    def __call__(self, key: str) -> None:
        with self._changed:
            self.keys.append(key)
            self._changed.notify_all()

    def wait_for(self, count: int) -> list[str]:
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.keys) >= count, DEADLINE_S), self.keys
            return list(self.keys)


def test_many_periods_share_one_thread_and_each_expires_once() -> None:
    expired = _Expired()
    timers = GraceTimers(expired)
    before = threading.active_count()
    try:
        keys = [f"sess_{i}" for i in range(200)]
        for key in keys:
            assert timers.start(key, 0.01)
        assert threading.active_count() - before <= 1  # a Timer each would be 200 threads
        assert sorted(expired.wait_for(len(keys))) == sorted(keys)
    finally:
        timers.shutdown()


def test_a_cancelled_period_never_expires_and_a_pending_one_is_not_started_twice() -> None:
    expired = _Expired()
    release = threading.Event()

    def expire(key: str) -> None:
        expired(key)
        if key == "blocker":  # holds the timers' one thread while the test starts and cancels
            assert release.wait(DEADLINE_S)

    timers = GraceTimers(expire)
    try:
        assert timers.start("blocker", 0.0)
        assert expired.wait_for(1) == ["blocker"]
        assert timers.start("first", 0.0)
        assert timers.start("second", 0.0)
        assert not timers.start("second", 0.0)  # already pending: the first period stands
        assert timers.cancel("first")
        assert not timers.cancel("first")
        release.set()
        # "first" was due before "second": had it not been cancelled it would be listed first.
        assert expired.wait_for(2) == ["blocker", "second"]
        assert "second" not in timers
        assert timers.start("second", 0.0)  # a new period once the last one ended
        assert expired.wait_for(3) == ["blocker", "second", "second"]
    finally:
        timers.shutdown()
    assert not timers.start("third", 0.0)
