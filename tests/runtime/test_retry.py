"""Retry timing and retry decisions, through the real runtime where they matter."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from tests.runtime import scenarios as sc
from tests.support.runtime_harness import check_cards, harness, lifecycle
from toolprep.runtime.kernel.retry import RetryPolicy
from toolprep.testing import ScriptedResponse

PARIS = ("call_paris", "get_weather", {"city": "Paris"})


def test_backoff_grows_exponentially_with_bounded_jitter() -> None:
    policy = RetryPolicy(base_delay=0.5, multiplier=2.0, max_delay=20.0, jitter=0.25)
    rng = random.Random(1)
    delays = [policy.wait(n, rng=rng).seconds for n in (1, 2, 3, 4)]
    for n, delay in enumerate(delays, start=1):
        base = 0.5 * 2 ** (n - 1)
        assert base <= delay <= base * 1.25
    assert policy.wait(30).seconds == 20.0


def test_retry_after_is_a_floor_but_capped() -> None:
    policy = RetryPolicy(base_delay=0.1, jitter=0.0, max_delay=5.0)
    assert policy.wait(1, retry_after=2.0).seconds == 2.0
    assert policy.wait(1, retry_after=60.0).seconds == 5.0
    assert policy.wait(1, retry_after=0.01).seconds == pytest.approx(0.1)


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_http_429_retry_after_is_honoured(kind: str, tmp_path: Path) -> None:
    policy = RetryPolicy(max_retries=2, base_delay=0.01, jitter=0.0, max_delay=2.0)
    with harness(kind, tmp_path, retry=policy) as h:
        h.server.enqueue(
            ScriptedResponse(
                status=429,
                headers={"retry-after": "0.3"},
                body={
                    "type": "error",
                    "error": {"type": "rate_limit_error", "message": "slow down"},
                },
            ),
            sc.ok(sc.text_turn(kind)),
        )
        sid, sink = h.session()
        started = time.monotonic()
        result = h.turn(sid, sink)
        waited = time.monotonic() - started
    assert result.stop_reason == "end_turn"
    assert h.runtime.supervisor_state.delays == [pytest.approx(0.3)]
    assert waited >= 0.3


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_500_then_success(kind: str, tmp_path: Path) -> None:
    with harness(kind, tmp_path) as h:
        h.server.enqueue(
            ScriptedResponse(
                status=500, body={"error": {"message": "boom", "type": "server_error"}}
            ),
            sc.ok(sc.calls_turn(kind, [PARIS])),
            sc.ok(sc.text_turn(kind)),
        )
        sid, sink = h.session()
        assert h.turn(sid, sink).stop_reason == "end_turn"
        check_cards(sink.frames())
        assert lifecycle(sink.frames()) == {"call_paris": ["preparing", "in_progress", "completed"]}


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_retries_are_bounded(kind: str, tmp_path: Path) -> None:
    with harness(kind, tmp_path, max_retries=2) as h:
        for _ in range(5):
            h.server.enqueue(sc.prepared_then_error(kind, PARIS))
        sid, sink = h.session()
        result = h.turn(sid, sink)
        check_cards(sink.frames())
        assert result.stop_reason is None and result.error
        assert len(h.server.requests) == 3  # first try + 2 retries
        ids = lifecycle(sink.frames())
        assert ids == {
            "call_paris": ["preparing", "discarded"],
            "call_paris_2": ["preparing", "discarded"],
            "call_paris_3": ["preparing", "discarded"],
        }


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_non_retryable_error_goes_straight_to_fallback(kind: str, tmp_path: Path) -> None:
    with harness(kind, tmp_path, models=("primary", "backup"), max_retries=3) as h:
        h.server.enqueue(
            ScriptedResponse(
                status=400,
                body={
                    "type": "error",
                    "error": {"type": "invalid_request_error", "message": "bad"},
                },
            ),
            sc.ok(sc.text_turn(kind)),
        )
        sid, sink = h.session()
        assert h.turn(sid, sink).stop_reason == "end_turn"
        assert [r.body["model"] for r in h.server.requests] == ["primary", "backup"]


def test_retry_waits_real_backoff_before_next_attempt(tmp_path: Path) -> None:
    kind = "anthropic"
    with harness(kind, tmp_path) as h:
        h.server.enqueue(sc.prepared_then_error(kind, PARIS), sc.ok(sc.text_turn(kind)))
        sid, sink = h.session()
        h.turn(sid, sink)
        first, second = h.server.requests[0], h.server.requests[1]
        assert first.body["messages"] == second.body["messages"]
        assert h.runtime.supervisor_state.retries == 1
