"""The fault suite: each fault, then the card invariants, no stale execution, and a
session (and its neighbours) that keeps working afterwards."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from tests.runtime import scenarios as sc
from tests.support.eventually import eventually
from tests.support.runtime_harness import Harness, RecordingSink, check_cards, harness, lifecycle
from toolprep.messages.content import TextPart
from toolprep.runtime.tools.config import ToolConfig
from toolprep.runtime.tools.registry import default_registry
from toolprep.testing import ScriptedResponse

PARIS = ("call_paris", "get_weather", {"city": "Paris"})
TOKYO = ("call_tokyo", "get_weather", {"city": "Tokyo"})


def _recovers(h: Harness, sid: str, sink: RecordingSink) -> None:
    h.server.enqueue(
        sc.ok(sc.calls_turn(h.kind, [("call_after", "get_weather", {"city": "Oslo"})])),
        sc.ok(sc.text_turn(h.kind)),
    )
    assert h.turn(sid, sink).stop_reason == "end_turn"
    check_cards(sink.frames())
    assert lifecycle(sink.frames())["call_after"] == ["preparing", "in_progress", "completed"]


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_malformed_json_data_line_is_retried(kind: str, tmp_path: Path) -> None:
    with harness(kind, tmp_path) as h:
        opened = sc.until_opened(kind, PARIS)
        h.server.enqueue(
            ScriptedResponse(events=[*opened, b"data: {not json at all\n\n"]),
            sc.ok(sc.calls_turn(kind, [TOKYO])),
            sc.ok(sc.text_turn(kind)),
        )
        sid, sink = h.session()
        assert h.turn(sid, sink).stop_reason == "end_turn"
        check_cards(sink.frames())
        assert lifecycle(sink.frames())["call_paris"] == ["preparing", "discarded"]
        assert h.tool.executed_ids == ["call_tokyo"]
        _recovers(h, sid, sink)


def test_duplicated_message_start_is_retried(tmp_path: Path) -> None:
    kind = "anthropic"
    with harness(kind, tmp_path) as h:
        events = sc.until_opened(kind, PARIS)
        h.server.enqueue(ScriptedResponse(events=[*events, events[0]]), sc.ok(sc.text_turn(kind)))
        sid, sink = h.session()
        assert h.turn(sid, sink).stop_reason == "end_turn"
        check_cards(sink.frames())
        assert lifecycle(sink.frames()) == {"call_paris": ["preparing", "discarded"]}
        assert h.tool.executed == []


def test_read_timeout_mid_stream_is_a_retryable_failure(tmp_path: Path) -> None:
    kind = "openai"
    with harness(kind, tmp_path, provider_timeout=0.5) as h:
        # The stalled stream is cut by the SDK's read timeout, not by the user.
        h.server.enqueue(sc.prepared_then_stall(kind, PARIS), sc.ok(sc.text_turn(kind)))
        sid, sink = h.session()
        result = h.turn(sid, sink, timeout=20)
        check_cards(sink.frames())
        assert result.stop_reason == "end_turn"
        assert lifecycle(sink.frames()) == {"call_paris": ["preparing", "discarded"]}


@pytest.mark.parametrize("phase", ["streaming", "tools", "backoff", "idle"])
def test_cancel_storm_in_every_phase(phase: str, tmp_path: Path) -> None:
    kind = "anthropic"
    from toolprep.runtime.kernel.retry import RetryPolicy

    policy = RetryPolicy(max_retries=2, base_delay=2.0, jitter=0.0, max_delay=2.0)
    with harness(kind, tmp_path, retry=policy) as h:
        sid, sink = h.session()
        if phase == "idle":
            for _ in range(3):
                h.runtime.cancel(sid)  # cancel with no turn: nothing happens, nothing breaks
        else:
            if phase == "streaming":
                h.server.enqueue(sc.prepared_then_stall(kind, PARIS))
            elif phase == "tools":
                h.tool.behaviour = "hang"
                h.server.enqueue(sc.ok(sc.calls_turn(kind, [PARIS])))
            else:
                h.server.enqueue(sc.prepared_then_error(kind, PARIS))
            reply = h.prompt(sid, sink)
            if phase == "streaming":
                sink.wait_for_preparing()
            elif phase == "tools":
                sink.wait_for(lambda fs: any(f.get("status") == "in_progress" for f in fs))
            else:
                sink.wait_for(
                    lambda fs: any((f.get("_meta") or {}).get("preparationDiscarded") for f in fs)
                )
            for _ in range(5):
                h.runtime.cancel(sid)  # cancel twice (and more)
            assert reply.result(timeout=10).stop_reason == "cancelled"
            check_cards(sink.frames())
        h.tool.behaviour = "ok"
        _recovers(h, sid, sink)


@pytest.mark.process  # the tool runs a shell command
def test_tool_printing_megabytes_is_capped(tmp_path: Path) -> None:
    kind = "anthropic"
    registry = default_registry(ToolConfig(allow_shell=True))
    command = (
        "call_sh",
        "run_shell_command",
        {"command": "python3 -c \"import sys; sys.stdout.write('x' * 8_000_000)\""},
    )
    with harness(kind, tmp_path, registry=registry) as h:
        h.server.enqueue(sc.ok(sc.calls_turn(kind, [command])), sc.ok(sc.text_turn(kind)))
        sid, sink = h.session()
        assert h.turn(sid, sink).stop_reason == "end_turn"
        check_cards(sink.frames())
        assert lifecycle(sink.frames())["call_sh"] == ["preparing", "in_progress", "completed"]
        sent_back = json.dumps(h.server.requests[1].body)
        assert len(sent_back) < 200_000  # 8 MB of output never reaches the model or the client
        frame_bytes = sum(len(json.dumps(f)) for f in sink.frames())
        assert frame_bytes < 200_000


def test_other_sessions_unaffected_by_a_failing_one(tmp_path: Path) -> None:
    kind = "anthropic"
    with harness(kind, tmp_path, max_retries=0) as h:
        h.server.enqueue(
            ScriptedResponse(
                status=400,
                body={
                    "type": "error",
                    "error": {"type": "invalid_request_error", "message": "bad request"},
                },
            )
        )
        bad, bad_sink = h.session()
        assert h.turn(bad, bad_sink).error
        good, good_sink = h.session()
        _recovers(h, good, good_sink)
        _recovers(h, bad, bad_sink)


def test_thousand_sessions_opened_and_closed_leave_nothing_behind(tmp_path: Path) -> None:
    kind = "anthropic"
    with harness(kind, tmp_path) as h:
        warm, warm_sink = h.session()
        _recovers(h, warm, warm_sink)  # every role and pool is up before counting threads
        h.runtime.close_session(warm)
        threads_before = threading.active_count()
        for _round in range(5):
            sessions = [h.session() for _ in range(200)]
            for sid, _ in sessions:
                h.runtime.close_session(sid)
        eventually(lambda: not h.runtime.supervisor_state.sessions)
        assert h.runtime.supervisor_state.sessions == {}
        assert h.runtime.tracker_state.sessions == {}
        assert h.runtime.emitter_state.sinks == {}
        assert threading.active_count() <= threads_before
        sid, sink = h.session()
        _recovers(h, sid, sink)


def test_closing_a_session_mid_turn_discards_its_cards(tmp_path: Path) -> None:
    kind = "anthropic"
    with harness(kind, tmp_path) as h:
        h.server.enqueue(sc.prepared_then_stall(kind, PARIS))
        sid, sink = h.session()
        reply = h.runtime.prompt(sid, [TextPart("go")])
        sink.wait_for_preparing()
        h.runtime.close_session(sid)
        assert reply.result(timeout=10).stop_reason == "cancelled"
        sink.wait_for(
            lambda fs: any((f.get("_meta") or {}).get("preparationDiscarded") for f in fs)
        )
        assert lifecycle(sink.frames()) == {"call_paris": ["preparing", "discarded"]}
