"""A runtime with a store: every turn's frames and history land in SQLite, and a new
runtime (a later process) restores the session and goes on with the same history."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.runtime import scenarios as sc
from tests.support.fake_provider import FakeProviderServer
from tests.support.runtime_harness import RecordingSink, check_cards, harness, lifecycle
from toolprep.runtime.session_host import UnknownSession
from toolprep.runtime.store import SessionStore

KIND = "anthropic"
WEATHER = ("call_paris", "get_weather", {"city": "Paris"})


def test_frames_and_history_are_stored_and_a_new_runtime_goes_on_from_them(
    tmp_path: Path,
) -> None:
    db = tmp_path / "sessions.db"
    with FakeProviderServer() as server:
        server.enqueue(
            sc.ok(sc.calls_turn(KIND, [WEATHER])), sc.ok(sc.text_turn(KIND, "Sunny in Paris."))
        )
        with SessionStore(db) as store, harness(KIND, tmp_path, store=store, server=server) as h:
            session_id, sink = h.session()
            assert h.turn(session_id, sink, "weather in Paris?").stop_reason == "end_turn"
            sent = [f for f in sink.frames() if f.get("sessionUpdate") != "__turn_result__"]

        with SessionStore(db) as store:
            stored = store.load(session_id)
        assert list(stored.frames) == sent  # exactly what the editor was sent, in order
        assert lifecycle(list(stored.frames)) == {
            "call_paris": ["preparing", "in_progress", "completed"]
        }
        assert [c.role for c in stored.history] == ["user", "model", "user", "model"]
        assert stored.info.title == "weather in Paris?"
        assert stored.info.cwd == str(tmp_path.resolve())

        # A later process: the session comes back with its history, and the model sees it.
        server.enqueue(sc.ok(sc.text_turn(KIND, "Still sunny.")))
        with SessionStore(db) as store, harness(KIND, tmp_path, store=store, server=server) as h:
            again = RecordingSink()
            restored = h.runtime.restore_session(session_id, again)
            assert list(restored.frames) == sent
            assert h.turn(session_id, again, "and now?").stop_reason == "end_turn"
        last_request = json.dumps(server.requests[-1].body)
        assert "weather in Paris?" in last_request and "Sunny in Paris." in last_request
        assert "and now?" in last_request
        with SessionStore(db) as store:
            after = store.load(session_id)
        assert len(after.history) == 6
        check_cards(list(after.frames))


def test_restoring_an_unknown_session_is_a_clear_error(tmp_path: Path) -> None:
    with (
        SessionStore(tmp_path / "s.db") as store,
        harness(KIND, tmp_path, store=store) as h,
        pytest.raises(UnknownSession, match="Session not found: sess_nope"),
    ):
        h.runtime.restore_session("sess_nope", RecordingSink())
    with harness(KIND, tmp_path) as h, pytest.raises(UnknownSession):
        h.runtime.restore_session("sess_nope", RecordingSink())


def test_a_failing_store_costs_the_record_not_the_session(tmp_path: Path) -> None:
    """The database vanishes under the runtime (disk gone): turns still run and answer."""
    db = tmp_path / "s.db"
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.text_turn(KIND, "One.")), sc.ok(sc.text_turn(KIND, "Two.")))
        with SessionStore(db) as store, harness(KIND, tmp_path, store=store, server=server) as h:
            session_id, sink = h.session()
            assert h.turn(session_id, sink).stop_reason == "end_turn"
            store.close()  # every later write fails
            assert h.turn(session_id, sink).stop_reason == "end_turn"
        assert "Two." in json.dumps(sink.frames())
