"""Random interleavings of chunks, retries, fallbacks, cancels, errors and crashes.

Hypothesis writes the provider's side of a turn (what each attempt streams and
how it ends) and when the user cancels or a role crashes; the real runtime
plays it. After every turn the invariants must hold: every card terminal
exactly once, nothing after a terminal, no execution of a call from an
abandoned attempt, no arguments in preparing frames.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.runtime import scenarios as sc
from tests.support.runtime_harness import (
    TURN_END,
    check_cards,
    harness,
    is_discarded,
    is_preparing,
    lifecycle,
)
from toolprep.actors.base import EXECUTOR, READER, SUPERVISOR, TRACKER

ENDINGS = ["ok", "in_band_error", "truncated", "cut", "parsed_error", "stall_cancel", "stall_crash"]
ROLES = [TRACKER, READER, SUPERVISOR, EXECUTOR]

attempt_strategy = st.fixed_dictionaries(
    {
        "calls": st.integers(min_value=1, max_value=3),
        "ending": st.sampled_from(ENDINGS),
        "text": st.booleans(),
        "fragment": st.integers(min_value=1, max_value=12),
        "role": st.sampled_from(ROLES),
    }
)


def _response(kind: str, attempt: dict[str, Any], calls: list[sc.Call]) -> sc.ScriptedResponse:
    first = calls[0]
    ending = attempt["ending"]
    text = "Let me look." if attempt["text"] else None
    if ending == "ok":
        return sc.ok(sc.calls_turn(kind, calls, text=text, fragment_size=attempt["fragment"]))
    if ending == "in_band_error":
        return sc.prepared_then_error(kind, first)
    if ending == "truncated":
        return sc.prepared_then_truncated(kind, first)
    if ending == "cut":
        return sc.prepared_then_cut(kind, first)
    if ending == "parsed_error":
        return sc.parsed_then_error(kind, first)
    return sc.prepared_then_stall(kind, first)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    kind=st.sampled_from(["anthropic", "openai"]),
    attempts=st.lists(attempt_strategy, min_size=1, max_size=4),
    models=st.integers(min_value=1, max_value=2),
)
def test_any_interleaving_keeps_the_card_invariants(
    tmp_path_factory: Any, kind: str, attempts: list[dict[str, Any]], models: int
) -> None:
    tmp_path: Path = tmp_path_factory.mktemp("prop")
    ids = itertools.count(1)
    planned: list[tuple[dict[str, Any], list[sc.Call]]] = []
    for attempt in attempts:
        calls: list[sc.Call] = [
            (f"call_{next(ids)}", "get_weather", {"city": f"C{n}" * (n + 1)})
            for n in range(attempt["calls"])
        ]
        planned.append((attempt, calls))
    completed_ids = {c[0] for a, calls in planned if a["ending"] == "ok" for c in calls}

    with harness(kind, tmp_path, models=tuple(f"m{i}" for i in range(models)), max_retries=2) as h:
        for attempt, calls in planned:
            h.server.enqueue(_response(kind, attempt, calls))
        for _ in range(8):
            h.server.enqueue(sc.ok(sc.text_turn(kind)))
        sid, sink = h.session()
        reply = h.prompt(sid, sink)
        for attempt, calls in planned:
            if not attempt["ending"].startswith("stall"):
                continue
            stall_id = calls[0][0]

            def reached(frames: list[dict[str, Any]], stall_id: str = stall_id) -> bool:
                return any(f is TURN_END for f in frames) or any(
                    is_preparing(f) and f["toolCallId"] == stall_id for f in frames
                )

            sink.wait_for(reached, timeout=20)
            if any(f is TURN_END for f in sink.frames()):
                break
            if attempt["ending"] == "stall_cancel":
                h.runtime.cancel(sid)
                break
            h.runtime.crash_role(attempt["role"], sid)
        result = reply.result(timeout=30)
        frames = sink.frames()
        check_cards(frames)
        cards = lifecycle(frames)
        for call_id in h.tool.executed_ids:
            assert call_id in completed_ids, f"{call_id} ran but its attempt was abandoned"
            assert "discarded" not in cards[call_id]
            assert "in_progress" in cards[call_id]
        for call_id, labels in cards.items():
            if "discarded" in labels:
                assert call_id not in h.tool.executed_ids
        assert result.stop_reason in (None, "end_turn", "cancelled")
        assert all(not is_discarded(f) or f["content"] == [] for f in frames)
