"""Lifecycle rules, each through the real actors, SDKs and a loopback provider."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.runtime import scenarios as sc
from tests.support.eventually import eventually
from tests.support.runtime_harness import (
    RecordingSink,
    check_cards,
    harness,
    is_discarded,
    is_preparing,
    lifecycle,
    tool_frames,
)
from toolprep.actors.base import EMITTER, EXECUTOR, READER, SUPERVISOR, TRACKER
from toolprep.messages.turns import AttemptChunks, ChunksReceived

PROVIDERS = ["anthropic", "openai"]
PARIS = ("call_paris", "get_weather", {"city": "Paris"})
TOKYO = ("call_tokyo", "get_weather", {"city": "Tokyo"})


def _request_text(server, index: int) -> str:  # type: ignore[no-untyped-def]
    return json.dumps(server.requests[index].body)


@pytest.mark.parametrize("kind", PROVIDERS)
def test_preparing_then_in_progress_then_completed(kind: str, tmp_path: Path) -> None:
    with harness(kind, tmp_path) as h:
        h.server.enqueue(
            sc.ok(sc.calls_turn(kind, [PARIS], text="Checking.")), sc.ok(sc.text_turn(kind))
        )
        sid, sink = h.session()
        result = h.turn(sid, sink)
        frames = sink.frames()
        check_cards(frames)
        assert result.stop_reason == "end_turn"
        assert lifecycle(frames) == {"call_paris": ["preparing", "in_progress", "completed"]}
        started = next(f for f in tool_frames(frames) if f.get("status") == "in_progress")
        assert started["rawInput"] == {"city": "Paris"}
        assert started["title"] == "Weather in Paris"
        assert h.tool.executed == [("call_paris", {"city": "Paris"})]
        # The tool result went back to the model in the provider's own format.
        follow_up = _request_text(h.server, 1)
        assert "call_paris" in follow_up and "Sunny in Paris" in follow_up
        marker = "tool_result" if kind == "anthropic" else '"role": "tool"'
        assert marker in follow_up


@pytest.mark.parametrize("kind", PROVIDERS)
def test_parallel_calls_keep_model_order(kind: str, tmp_path: Path) -> None:
    with harness(kind, tmp_path) as h:
        h.server.enqueue(sc.ok(sc.calls_turn(kind, [PARIS, TOKYO])), sc.ok(sc.text_turn(kind)))
        sid, sink = h.session()
        assert h.turn(sid, sink).stop_reason == "end_turn"
        check_cards(sink.frames())
        preparing = [f["toolCallId"] for f in sink.frames() if is_preparing(f)]
        assert preparing == ["call_paris", "call_tokyo"]
        assert h.tool.executed_ids == ["call_paris", "call_tokyo"]


@pytest.mark.parametrize("kind", PROVIDERS)
@pytest.mark.parametrize(
    "failure",
    ["in_band_error", "truncated", "connection_cut"],
)
def test_retry_discards_abandoned_card_and_never_runs_it(
    kind: str, failure: str, tmp_path: Path
) -> None:
    first = {
        "in_band_error": sc.prepared_then_error,
        "truncated": sc.prepared_then_truncated,
        "connection_cut": sc.prepared_then_cut,
    }[failure](kind, PARIS)
    with harness(kind, tmp_path) as h:
        h.server.enqueue(first, sc.ok(sc.calls_turn(kind, [TOKYO])), sc.ok(sc.text_turn(kind)))
        sid, sink = h.session()
        result = h.turn(sid, sink)
        frames = sink.frames()
        check_cards(frames)
        assert result.stop_reason == "end_turn"
        assert lifecycle(frames) == {
            "call_paris": ["preparing", "discarded"],
            "call_tokyo": ["preparing", "in_progress", "completed"],
        }
        assert h.tool.executed_ids == ["call_tokyo"]
        # The retry request does not mention the abandoned call.
        assert "call_paris" not in _request_text(h.server, 1)


@pytest.mark.parametrize("kind", PROVIDERS)
def test_parsed_call_of_failed_stream_is_discarded_not_run(kind: str, tmp_path: Path) -> None:
    with harness(kind, tmp_path) as h:
        h.server.enqueue(sc.parsed_then_error(kind, PARIS), sc.ok(sc.text_turn(kind)))
        sid, sink = h.session()
        assert h.turn(sid, sink).stop_reason == "end_turn"
        check_cards(sink.frames())
        assert lifecycle(sink.frames()) == {"call_paris": ["preparing", "discarded"]}
        assert h.tool.executed == []


@pytest.mark.parametrize("kind", PROVIDERS)
def test_model_fallback_discards_and_uses_next_model(kind: str, tmp_path: Path) -> None:
    with harness(kind, tmp_path, models=("primary", "backup"), max_retries=0) as h:
        h.server.enqueue(
            sc.prepared_then_error(kind, PARIS),
            sc.ok(sc.calls_turn(kind, [TOKYO])),
            sc.ok(sc.text_turn(kind)),
        )
        sid, sink = h.session()
        assert h.turn(sid, sink).stop_reason == "end_turn"
        check_cards(sink.frames())
        assert lifecycle(sink.frames())["call_paris"] == ["preparing", "discarded"]
        assert [r.body["model"] for r in h.server.requests] == ["primary", "backup", "backup"]
        assert h.tool.executed_ids == ["call_tokyo"]


@pytest.mark.parametrize("kind", PROVIDERS)
def test_fallback_model_also_failing_ends_turn_with_error(kind: str, tmp_path: Path) -> None:
    with harness(kind, tmp_path, models=("primary", "backup"), max_retries=0) as h:
        h.server.enqueue(sc.prepared_then_error(kind, PARIS), sc.prepared_then_error(kind, TOKYO))
        sid, sink = h.session()
        result = h.turn(sid, sink)
        check_cards(sink.frames())
        assert result.stop_reason is None and result.error
        assert lifecycle(sink.frames()) == {
            "call_paris": ["preparing", "discarded"],
            "call_tokyo": ["preparing", "discarded"],
        }
        # The session keeps working afterwards.
        h.server.enqueue(sc.ok(sc.text_turn(kind)))
        assert h.turn(sid, sink).stop_reason == "end_turn"


@pytest.mark.parametrize("kind", PROVIDERS)
def test_user_cancel_mid_stream_closes_stream_and_discards(kind: str, tmp_path: Path) -> None:
    with harness(kind, tmp_path) as h:
        h.server.enqueue(sc.prepared_then_stall(kind, PARIS))
        sid, sink = h.session()
        reply = h.prompt(sid, sink)
        sink.wait_for_preparing()
        h.runtime.cancel(sid)
        result = reply.result(timeout=10)
        assert result.stop_reason == "cancelled"
        check_cards(sink.frames())
        assert lifecycle(sink.frames()) == {"call_paris": ["preparing", "discarded"]}
        assert h.tool.executed == []
        # Cancelling closed the HTTP response: the stalled server saw the client go.
        eventually(lambda: h.server.disconnects >= 1)
        assert h.server.disconnects == 1


@pytest.mark.parametrize("kind", PROVIDERS)
def test_cancel_while_tool_runs_ends_card_failed(kind: str, tmp_path: Path) -> None:
    with harness(kind, tmp_path) as h:
        h.tool.behaviour = "hang"
        h.server.enqueue(sc.ok(sc.calls_turn(kind, [PARIS])))
        sid, sink = h.session()
        reply = h.prompt(sid, sink)
        sink.wait_for(lambda fs: any(f.get("status") == "in_progress" for f in fs))
        h.runtime.cancel(sid)
        assert reply.result(timeout=10).stop_reason == "cancelled"
        check_cards(sink.frames())
        assert lifecycle(sink.frames()) == {"call_paris": ["preparing", "in_progress", "failed"]}


def test_normal_end_discards_preparation_without_complete_call(tmp_path: Path) -> None:
    # Anthropic names a call, then ends the message normally without ever closing its block.
    kind = "anthropic"
    opened = sc.until_opened(kind, PARIS)
    ending = [
        e for e in sc.events(sc.text_turn(kind)) if b"message_delta" in e or b"message_stop" in e
    ]
    with harness(kind, tmp_path) as h:
        h.server.enqueue(sc.ScriptedResponse(events=[*opened, *ending]))
        sid, sink = h.session()
        result = h.turn(sid, sink)
        check_cards(sink.frames())
        assert result.stop_reason == "end_turn"
        assert lifecycle(sink.frames()) == {"call_paris": ["preparing", "discarded"]}
        assert h.tool.executed == [] and len(h.server.requests) == 1


def test_openai_finish_with_unfinished_arguments_never_runs_them(tmp_path: Path) -> None:
    kind = "openai"
    opened = sc.until_opened(kind, PARIS)
    ending = [
        e for e in sc.events(sc.text_turn(kind)) if b'"finish_reason":"stop"' in e or b"[DONE]" in e
    ]
    with harness(kind, tmp_path) as h:
        h.server.enqueue(sc.ScriptedResponse(events=[*opened, *ending]), sc.ok(sc.text_turn(kind)))
        sid, sink = h.session()
        h.turn(sid, sink)
        check_cards(sink.frames())
        assert lifecycle(sink.frames()) == {"call_paris": ["preparing", "discarded"]}
        assert h.tool.executed == []


@pytest.mark.parametrize("kind", PROVIDERS)
def test_reused_history_id_gets_fresh_id_in_every_frame(kind: str, tmp_path: Path) -> None:
    with harness(kind, tmp_path) as h:
        h.server.enqueue(
            sc.ok(sc.calls_turn(kind, [PARIS])),
            sc.ok(sc.text_turn(kind)),
            sc.ok(sc.calls_turn(kind, [("call_paris", "get_weather", {"city": "Lyon"})])),
            sc.ok(sc.text_turn(kind)),
        )
        sid, sink = h.session()
        h.turn(sid, sink)
        h.turn(sid, sink)
        frames = sink.frames()
        check_cards(frames)
        cards = lifecycle(frames)
        assert cards == {
            "call_paris": ["preparing", "in_progress", "completed"],
            "call_paris_2": ["preparing", "in_progress", "completed"],
        }
        assert h.tool.executed == [
            ("call_paris", {"city": "Paris"}),
            ("call_paris_2", {"city": "Lyon"}),
        ]
        assert "call_paris_2" in _request_text(h.server, 3)


@pytest.mark.parametrize("kind", PROVIDERS)
@pytest.mark.parametrize("behaviour", ["raise", "tool_error"])
def test_failing_tool_is_a_failed_result_not_a_discard(
    kind: str, behaviour: str, tmp_path: Path
) -> None:
    with harness(kind, tmp_path) as h:
        h.tool.behaviour = behaviour
        h.server.enqueue(sc.ok(sc.calls_turn(kind, [PARIS])), sc.ok(sc.text_turn(kind)))
        sid, sink = h.session()
        assert h.turn(sid, sink).stop_reason == "end_turn"
        frames = sink.frames()
        check_cards(frames)
        assert lifecycle(frames) == {"call_paris": ["preparing", "in_progress", "failed"]}
        failed = next(f for f in frames if f.get("status") == "failed")
        assert not is_discarded(failed)
        assert failed["content"][0]["content"]["text"]
        assert ("exploded" if behaviour == "raise" else "city not found") in _request_text(
            h.server, 1
        )


@pytest.mark.parametrize("kind", PROVIDERS)
def test_tool_timeout_fails_card(kind: str, tmp_path: Path) -> None:
    with harness(kind, tmp_path, tool_timeout=0.3) as h:
        h.tool.behaviour = "hang"
        h.server.enqueue(sc.ok(sc.calls_turn(kind, [PARIS])), sc.ok(sc.text_turn(kind)))
        sid, sink = h.session()
        assert h.turn(sid, sink).stop_reason == "end_turn"
        check_cards(sink.frames())
        assert lifecycle(sink.frames()) == {"call_paris": ["preparing", "in_progress", "failed"]}
        assert "Timed out" in _request_text(h.server, 1)


@pytest.mark.parametrize("kind", PROVIDERS)
def test_todo_write_shows_plan_but_no_card(kind: str, tmp_path: Path) -> None:
    todos = {"todos": [{"content": "Write tests", "status": "in_progress"}]}
    with harness(kind, tmp_path) as h:
        h.server.enqueue(
            sc.ok(sc.calls_turn(kind, [("call_todo", "todo_write", todos)])),
            sc.ok(sc.text_turn(kind)),
        )
        sid, sink = h.session()
        assert h.turn(sid, sink).stop_reason == "end_turn"
        frames = sink.frames()
        check_cards(frames)
        assert tool_frames(frames) == []
        plans = [f for f in frames if f["sessionUpdate"] == "plan"]
        assert plans and plans[0]["entries"][0]["content"] == "Write tests"


@pytest.mark.parametrize("kind", PROVIDERS)
def test_failing_frame_write_does_not_stop_other_discards(kind: str, tmp_path: Path) -> None:
    def fail_first_discard(update: dict) -> bool:  # type: ignore[type-arg]
        return is_discarded(update) and update["toolCallId"] == "call_paris"

    sink = RecordingSink(fail_when=fail_first_discard)
    with harness(kind, tmp_path, models=("primary",), max_retries=0) as h:
        both = sc.events(sc.calls_turn(kind, [PARIS, TOKYO]))
        second = next(i for i, e in enumerate(both) if b"call_tokyo" in e)
        h.server.enqueue(sc.ScriptedResponse(events=[*both[: second + 1], sc.error_event(kind)]))
        sid, _ = h.session(sink)
        result = h.turn(sid, sink)
        # The attempt's own outcome (a stream error) is what the prompt reports.
        assert result.stop_reason is None and result.error
        assert lifecycle(sink.frames())["call_tokyo"] == ["preparing", "discarded"]
        assert h.runtime.emitter_state.write_failures == 1


@pytest.mark.parametrize("role", [TRACKER, READER, SUPERVISOR, EXECUTOR, EMITTER])
def test_role_crash_mid_stream_discards_and_recovers(role: str, tmp_path: Path) -> None:
    kind = "anthropic"
    with harness(kind, tmp_path) as h:
        h.server.enqueue(
            sc.prepared_then_stall(kind, PARIS),
            sc.ok(sc.calls_turn(kind, [TOKYO])),
            sc.ok(sc.text_turn(kind)),
        )
        sid, sink = h.session()
        reply = h.prompt(sid, sink)
        sink.wait_for_preparing()
        h.runtime.crash_role(role, sid)
        result = reply.result(timeout=15)
        check_cards(sink.frames())
        assert result.stop_reason == "end_turn", result
        assert lifecycle(sink.frames()) == {
            "call_paris": ["preparing", "discarded"],
            "call_tokyo": ["preparing", "in_progress", "completed"],
        }
        assert h.tool.executed_ids == ["call_tokyo"]
        assert h.runtime.directory.restarts.get(role) == 1
        # A second session works on the restarted role.
        h.server.enqueue(sc.ok(sc.text_turn(kind)))
        sid2, sink2 = h.session()
        assert h.turn(sid2, sink2).stop_reason == "end_turn"


def test_a_crash_on_a_batch_ends_the_attempt_of_every_session_in_it(tmp_path: Path) -> None:
    """A role that crashes on one hop carrying several sessions' work (chunks read in one
    loop iteration) lost that work for each of them: each attempt is discarded and retried,
    none left with a card that prepares forever."""
    kind = "anthropic"
    with harness(kind, tmp_path) as h:
        h.server.enqueue(
            sc.prepared_then_stall(kind, PARIS),
            sc.prepared_then_stall(kind, PARIS),
            sc.ok(sc.text_turn(kind)),
            sc.ok(sc.text_turn(kind)),
        )
        opened = [h.session() for _ in range(2)]
        replies = [h.prompt(sid, sink) for sid, sink in opened]
        for _, sink in opened:
            sink.wait_for_preparing()
        sessions = h.runtime.supervisor_state.sessions
        # Chunks no tracker can read: the handler raises, as a bug in it would.
        poisoned = ChunksReceived(
            tuple(
                AttemptChunks(sid, sessions[sid].attempt, (object(),))  # type: ignore[arg-type]
                for sid, _ in opened
            )
        )
        h.runtime.directory.tell(TRACKER, poisoned)
        for (_, sink), reply in zip(opened, replies, strict=True):
            assert reply.result(timeout=15).stop_reason == "end_turn"
            check_cards(sink.frames())
            assert lifecycle(sink.frames()) == {"call_paris": ["preparing", "discarded"]}
        assert h.runtime.directory.restarts.get(TRACKER) == 1


@pytest.mark.parametrize("kind", PROVIDERS)
def test_two_sessions_never_mix_frames(kind: str, tmp_path: Path) -> None:
    with harness(kind, tmp_path) as h:
        h.server.enqueue(
            sc.ok(sc.calls_turn(kind, [PARIS]), pace_s=0.005),
            sc.ok(sc.calls_turn(kind, [TOKYO]), pace_s=0.005),
            sc.ok(sc.text_turn(kind)),
            sc.ok(sc.text_turn(kind)),
        )
        sid1, sink1 = h.session()
        sid2, sink2 = h.session()
        r1, r2 = h.prompt(sid1, sink1), h.prompt(sid2, sink2)
        assert r1.result(timeout=20).stop_reason == "end_turn"
        assert r2.result(timeout=20).stop_reason == "end_turn"
        for sink, sid in ((sink1, sid1), (sink2, sid2)):
            assert {s for s, _ in sink.events} == {sid}
            check_cards(sink.frames())
        # Which session gets which scripted answer depends on which asks first; either
        # way each card lives in exactly one session.
        ids1, ids2 = set(lifecycle(sink1.frames())), set(lifecycle(sink2.frames()))
        assert ids1.isdisjoint(ids2)
        assert ids1 | ids2 == {PARIS[0], TOKYO[0]}


def test_calls_cut_by_the_token_limit_never_run(tmp_path: Path) -> None:
    kind = "openai"
    opened = sc.until_opened(kind, PARIS, extra_fragments=2)
    length_finish = [
        e
        for e in sc.events(sc.text_turn(kind, finish_reason="length"))
        if b'"length"' in e or b"[DONE]" in e
    ]
    with harness(kind, tmp_path) as h:
        h.server.enqueue(sc.ScriptedResponse(events=[*opened, *length_finish]))
        sid, sink = h.session()
        result = h.turn(sid, sink)
        check_cards(sink.frames())
        assert result.stop_reason == "max_tokens"
        assert lifecycle(sink.frames()) == {"call_paris": ["preparing", "discarded"]}
        assert h.tool.executed == [] and len(h.server.requests) == 1


@pytest.mark.parametrize("kind", PROVIDERS)
def test_refusal_discards_calls_and_stops(kind: str, tmp_path: Path) -> None:
    refused = (
        sc.anthropic_sse(tool_calls=[PARIS], stop_reason="refusal")
        if kind == "anthropic"
        else sc.openai_sse(tool_calls=[PARIS], finish_reason="content_filter")
    )
    with harness(kind, tmp_path) as h:
        h.server.enqueue(sc.ok(refused))
        sid, sink = h.session()
        result = h.turn(sid, sink)
        check_cards(sink.frames())
        assert result.stop_reason == "refusal"
        assert lifecycle(sink.frames()) == {"call_paris": ["preparing", "discarded"]}
        assert h.tool.executed == []


def test_a_long_reply_in_small_fragments_goes_back_to_the_model_whole(tmp_path: Path) -> None:
    """The tracker joins a reply's fragments for history once (linear in the reply), the
    thinking apart from the text and with its signature."""
    thinking = "".join(f"step {n}; " for n in range(200))
    answer = "".join(f"word{n} " for n in range(400))
    with harness("anthropic", tmp_path) as h:
        h.server.enqueue(
            sc.ok(sc.anthropic_sse(text=answer, thinking=thinking, fragment_size=3)),
            sc.ok(sc.text_turn("anthropic")),
        )
        sid, sink = h.session()
        h.turn(sid, sink)
        h.turn(sid, sink)
        [_, replied, _] = h.server.requests[1].body["messages"]
        assert replied["role"] == "assistant"
        assert replied["content"] == [
            {"type": "thinking", "thinking": thinking, "signature": "c2lnbmF0dXJl"},
            {"type": "text", "text": answer},
        ]
