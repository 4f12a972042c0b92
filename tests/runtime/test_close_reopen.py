"""Closing a session and loading it again at once, in the same process.

The editor closes a session and loads it straight back (a reconnect, a window
reload): the reloaded session must be the only one that writes to the new
sink, get every frame of its turns, and keep its history in the store. The
close's clean-up (detaching the old sink, forgetting the old turn) runs on the
role threads after ``close_session`` returns, so each test repeats the cycle
enough times for a misordering to show.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path

from tests.runtime import scenarios as sc
from tests.session_host.recording import RecordingFrameSink
from tests.support.runtime_harness import (
    TURN_END,
    check_cards,
    harness,
    is_discarded,
    is_preparing,
    message_text,
)
from toolprep.actors.base import TRACKER
from toolprep.messages.content import Candidate, Content, GenerateContentResponse, TextPart
from toolprep.messages.turns import AttemptChunks, ChunksReceived, TurnResult
from toolprep.runtime.hosting.runtime import Runtime
from toolprep.runtime.store import SessionStore
from toolprep.testing import FakeProviderServer

KIND = "anthropic"
CYCLES = 30
TURN_S = 20.0


@contextmanager
def _stored_runtime(tmp_path: Path) -> Iterator[tuple[FakeProviderServer, SessionStore, Runtime]]:
    """A runtime journaling into a SQLite file, against the loopback provider."""
    with (
        FakeProviderServer() as server,
        SessionStore(tmp_path / "sessions.db") as store,
        harness(KIND, tmp_path, store=store, server=server) as h,
    ):
        yield server, store, h.runtime


def _stall_on_a_card(
    server: FakeProviderServer,
    runtime: Runtime,
    sink: RecordingFrameSink,
    session_id: str,
    call_id: str,
    prompt: str,
) -> Future[TurnResult]:
    """Start a turn whose model stalls mid tool-call; return once its preparing card is shown."""
    server.enqueue(sc.prepared_then_stall(KIND, (call_id, "get_weather", {"city": "Oslo"})))
    reply = sink.mark_result(session_id, runtime.prompt(session_id, [TextPart(prompt)]))
    sink.wait_until(lambda events: any(isinstance(e, dict) and is_preparing(e) for _, e in events))
    return reply


def test_a_session_closed_and_loaded_again_at_once_keeps_every_frame_of_its_turns(
    tmp_path: Path,
) -> None:
    with _stored_runtime(tmp_path) as (server, store, runtime):
        first = RecordingFrameSink()
        session_id = runtime.open_session(tmp_path, first)
        server.enqueue(sc.ok(sc.text_turn(KIND, "reply 0")))
        reply = first.mark_result(session_id, runtime.prompt(session_id, [TextPart("prompt 0")]))
        assert reply.result(TURN_S).stop_reason == "end_turn"
        old = first
        lost: list[int] = []
        for cycle in range(1, CYCLES + 1):
            runtime.close_session(session_id)
            sink = RecordingFrameSink()
            runtime.load_session(session_id, sink, replay=False)
            server.enqueue(sc.ok(sc.text_turn(KIND, f"reply {cycle}")))
            prompt = [TextPart(f"prompt {cycle}")]
            result = sink.mark_result(session_id, runtime.prompt(session_id, prompt))
            assert result.result(TURN_S).stop_reason == "end_turn", cycle
            frames = sink.frames()
            if message_text(frames) != f"reply {cycle}" or frames[-1] != TURN_END:
                lost.append(cycle)
            assert sink.session_ids() <= {session_id}
            assert old.frames()[-1] == TURN_END, "the closed session's sink got frames after close"
            old = sink

        assert not lost, f"turns whose frames never reached the reloaded session's sink: {lost}"
        assert runtime.flush_journal()
        stored = store.sessions.load(session_id)
        # Every turn's prompt and reply are in the history the next load starts from.
        assert len(stored.history) == 2 * (CYCLES + 1)
        assert message_text(list(stored.frames)) == "".join(f"reply {n}" for n in range(CYCLES + 1))


def test_a_session_closed_mid_turn_and_loaded_again_at_once_starts_clean(
    tmp_path: Path,
) -> None:
    """The closed turn's discards go to the old sink; the reloaded session takes prompts."""
    with _stored_runtime(tmp_path) as (server, _store, runtime):
        sink = RecordingFrameSink()
        session_id = runtime.open_session(tmp_path, sink)
        failures: list[str] = []
        for cycle in range(1, CYCLES + 1):
            call_id = f"call_{cycle}"
            stalled = _stall_on_a_card(server, runtime, sink, session_id, call_id, f"stall {cycle}")
            runtime.close_session(session_id)
            old, sink = sink, RecordingFrameSink()
            runtime.load_session(session_id, sink, replay=False)
            server.enqueue(sc.ok(sc.text_turn(KIND, f"reply {cycle}")))
            reply = sink.mark_result(
                session_id, runtime.prompt(session_id, [TextPart(f"prompt {cycle}")])
            )
            result = reply.result(TURN_S)
            assert stalled.result(TURN_S).stop_reason == "cancelled"
            old_frames = old.frames()
            new_frames = sink.frames()
            if result.stop_reason != "end_turn":
                failures.append(f"{cycle}: reloaded prompt ended {result}")
            elif message_text(new_frames) != f"reply {cycle}":
                failures.append(f"{cycle}: reloaded turn's frames lost: {new_frames}")
            if any(f.get("toolCallId") == call_id for f in new_frames):
                failures.append(f"{cycle}: the closed turn's card reached the new sink")
            if not any(is_discarded(f) and f["toolCallId"] == call_id for f in old_frames):
                failures.append(f"{cycle}: the closed turn's card was never discarded")
            if failures:
                break
            check_cards(old_frames)
        assert not failures, failures


def test_a_session_closed_mid_turn_is_in_the_store_with_its_discards_once_close_returns(
    tmp_path: Path,
) -> None:
    """Another process may load the session as soon as the close released it: the closed
    turn's discards and its history must be in the file by then, not on their way."""
    with _stored_runtime(tmp_path) as (server, _store, runtime):
        sink = RecordingFrameSink()
        session_id = runtime.open_session(tmp_path, sink)
        missing: list[int] = []
        with SessionStore(tmp_path / "sessions.db") as other_process:
            for cycle in range(1, CYCLES + 1):
                call_id = f"call_{cycle}"
                stalled = _stall_on_a_card(
                    server, runtime, sink, session_id, call_id, f"stall {cycle}"
                )
                runtime.close_session(session_id)
                stored = other_process.sessions.load(session_id)
                if not any(
                    is_discarded(f) and f.get("toolCallId") == call_id for f in stored.frames
                ):
                    missing.append(cycle)
                assert stalled.result(TURN_S).stop_reason == "cancelled"
                sink = RecordingFrameSink()
                runtime.load_session(session_id, sink, replay=False)
        assert not missing, f"cycles whose discard was not stored when close returned: {missing}"


def test_a_late_chunk_of_the_closed_session_never_reaches_the_reopened_one(
    tmp_path: Path,
) -> None:
    """A chunk the old session's stream sent just before its task was cancelled may reach
    the tracker after the id was opened again and a new attempt began: attempt numbers
    are never reused within a runtime, so it is dropped as stale, not shown as the new
    turn's."""
    with _stored_runtime(tmp_path) as (server, _store, runtime):
        old = RecordingFrameSink()
        session_id = runtime.open_session(tmp_path, old)
        old_turn = _stall_on_a_card(server, runtime, old, session_id, "call_old", "stall")
        old_attempt = runtime.supervisor_state.sessions[session_id].attempt
        runtime.close_session(session_id)
        assert old_turn.result(TURN_S).stop_reason == "cancelled"

        sink = RecordingFrameSink()
        runtime.load_session(session_id, sink, replay=False)
        new_turn = _stall_on_a_card(server, runtime, sink, session_id, "call_new", "stall again")
        late = GenerateContentResponse((Candidate(Content("model", (TextPart("stale text"),))),))
        runtime.directory.tell(
            TRACKER, ChunksReceived((AttemptChunks(session_id, old_attempt, (late,)),))
        )
        runtime.cancel(session_id)
        assert new_turn.result(TURN_S).stop_reason == "cancelled"
        assert "stale text" not in message_text(sink.frames())
        check_cards(sink.frames())
