"""Store failures are logged once per cause and interval, then as counts."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from freezegun import freeze_time

from toolprep.runtime.store.failure_log import FailureLog

FULL = "database or disk is full"


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "test.store"]


def test_two_thousand_failures_in_a_burst_log_one_line_then_one_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = FailureLog(logging.getLogger("test.store"))
    with caplog.at_level(logging.ERROR), freeze_time("2026-01-01 00:00:00") as clock:
        for n in range(2000):
            log.failed("frame", FULL, f"3 frames of sess_{n} were not saved: {FULL}")
            clock.tick(timedelta(milliseconds=10))  # 2,000 failures in 20 s
        assert lines(caplog) == [
            f"store: 3 frames of sess_0 were not saved: {FULL} "
            "(further failures of this cause are counted for 30 s)"
        ]
        clock.tick(timedelta(seconds=10))  # 30 s after the first
        log.failed("frame", FULL, "3 frames of sess_x were not saved")
        assert lines(caplog)[1:] == [f"store: 1,999 frame writes failed in the last 30 s: {FULL}"]
        # Still failing: the next window counts on, and flush reports what it holds.
        clock.tick(timedelta(seconds=5))
        log.failed("frame", FULL, "3 frames of sess_y were not saved")
        log.flush()
        assert lines(caplog)[2:] == [f"store: 2 frame writes failed in the last 5 s: {FULL}"]
        assert all(r.levelno == logging.ERROR for r in caplog.records)


def test_each_cause_and_kind_is_logged_in_full_once(caplog: pytest.LogCaptureFixture) -> None:
    log = FailureLog(logging.getLogger("test.store"))
    with caplog.at_level(logging.ERROR), freeze_time("2026-01-01 00:00:00"):
        for _ in range(3):
            log.failed("frame", FULL, "frames lost: full")
            log.failed("history", FULL, "history lost: full")
            log.failed("frame", "disk I/O error", "frames lost: I/O")
        assert [m.split(" (")[0] for m in lines(caplog)] == [
            "store: frames lost: full",
            "store: history lost: full",
            "store: frames lost: I/O",
        ]
        log.flush()
        assert sorted(lines(caplog)[3:]) == [
            "store: 2 frame writes failed in the last 0 s: database or disk is full",
            "store: 2 frame writes failed in the last 0 s: disk I/O error",
            "store: 2 history writes failed in the last 0 s: database or disk is full",
        ]


def test_a_cause_quiet_for_an_interval_is_logged_in_full_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = FailureLog(logging.getLogger("test.store"), interval_s=30)
    with caplog.at_level(logging.ERROR), freeze_time("2026-01-01 00:00:00") as clock:
        log.failed("frame", FULL, "first")
        clock.tick(timedelta(seconds=31))
        log.failed("frame", FULL, "again")
        log.flush()  # nothing was only counted: no count line
        assert [m.split(" (")[0] for m in lines(caplog)] == ["store: first", "store: again"]


def test_the_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval_s must be > 0, got 0"):
        FailureLog(logging.getLogger("test.store"), interval_s=0)
