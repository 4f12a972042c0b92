"""A runtime with a store: every turn's frames and history land in SQLite, and a new
runtime (a later process) restores the session and goes on with the same history.

The journal numbers every frame and writes on a thread of its own: a locked database
slows the sessions down (a turn ends once it is stored) and never costs a frame silently;
one that refuses a write has the turn's end say so and leaves a gap a replay marks."""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.runtime import scenarios as sc
from tests.support.eventually import eventually
from tests.support.runtime_harness import RecordingSink, check_cards, harness, lifecycle
from tests.support.sqlite_lock import write_locked
from toolprep.messages import frames as fr
from toolprep.messages.content import Content, TextPart
from toolprep.runtime.kernel.session_host import UnknownSession
from toolprep.runtime.store import SessionStore
from toolprep.runtime.store.journal import (
    MAX_PENDING,
    RESERVE_BLOCK,
    THREAD_NAME,
    StoreJournal,
)
from toolprep.testing import FakeProviderServer

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
            stored = store.sessions.load(session_id)
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
            after = store.sessions.load(session_id)
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


# --- the journal alone, on a real database -------------------------------------------------

LONG_BUSY_S = 30.0  # longer than any bound below: a write waits for the lock, never fails


def card(call_id: str) -> list[dict[str, Any]]:
    """A card from preparing to completed: its last frame hands the batch to the writer."""
    return [
        fr.preparing(call_id, "read_file", "read"),
        fr.tool_result(call_id, "read_file", ok=True, content=[], raw_output=None),
    ]


def turn(n: int) -> tuple[list[dict[str, Any]], tuple[Content, ...]]:
    """Turn ``n``'s frames, and the history it leaves: one question per turn so far."""
    frames = [*card(f"call_{n}"), fr.agent_message_chunk(f"answer {n}")]
    return frames, tuple(Content("user", (TextPart(f"question {i}"),)) for i in range(n + 1))


def questions(n: int) -> list[tuple[TextPart, ...]]:
    return [(TextPart(f"question {i}"),) for i in range(n)]


@contextlib.contextmanager
def journal_on(
    tmp_path: Path,
    *sessions: str,
    busy_timeout: float = LONG_BUSY_S,
    max_pending: int = MAX_PENDING,
) -> Iterator[tuple[StoreJournal, SessionStore, Path]]:
    db = tmp_path / "journal.db"
    with SessionStore(db, busy_timeout=busy_timeout) as store:
        for session_id in sessions:
            store.sessions.create(session_id, str(tmp_path))
        journal = StoreJournal(store, max_pending=max_pending)
        for session_id in sessions:
            journal.start_session(session_id, 0)  # as the runtime does when it opens one
        try:
            yield journal, store, db
        finally:
            assert journal.close(timeout=LONG_BUSY_S)


def record_turn(journal: StoreJournal, session_id: str, n: int) -> list[dict[str, Any]]:
    """Turn ``n`` through the journal; the frames as it numbered them (what clients get)."""
    return record_turn_told(journal, session_id, n)[0]


def record_turn_told(
    journal: StoreJournal, session_id: str, n: int
) -> tuple[list[dict[str, Any]], str | None]:
    """``record_turn``, and the text of the turn end's notice of what is not stored."""
    frames, history = turn(n)
    numbered = [journal.record(session_id, frame) for frame in frames]
    notice = journal.turn_ended(session_id, history)
    return numbered, None if notice is None else str(notice["content"]["text"])


def test_frames_and_histories_land_in_order_per_session(tmp_path: Path) -> None:
    with journal_on(tmp_path, "sess_a", "sess_b") as (journal, store, _db):
        sent: dict[str, list[dict[str, Any]]] = {"sess_a": [], "sess_b": []}
        for n in range(20):
            for session_id in sent:
                sent[session_id] += record_turn(journal, session_id, n)
        assert journal.flush(timeout=LONG_BUSY_S)
        for session_id, frames in sent.items():
            stored = store.sessions.load(session_id)
            assert list(stored.frames) == frames
            assert [fr.seq_of(f) for f in frames] == list(range(1, len(frames) + 1))
            assert [c.parts for c in stored.history] == questions(20)
            assert stored.info.title == "question 0"  # titled by the first turn's history


def journal_threads(before: set[threading.Thread]) -> int:
    return sum(t.name == THREAD_NAME for t in set(threading.enumerate()) - before)


def test_the_writer_thread_exists_from_the_start_and_close_ends_it(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    with journal_on(tmp_path) as (journal, _store, _db):
        assert journal_threads(before) == 1
        assert journal.close(timeout=LONG_BUSY_S)
        assert journal.close(timeout=0)  # idempotent
        assert journal_threads(before) == 0


def test_a_turn_ends_once_its_frames_and_history_are_stored(tmp_path: Path) -> None:
    """A database locked (within the busy timeout) holds the turn's end back until the turn
    is stored: its reply never runs ahead of its record."""
    with journal_on(tmp_path, "sess_a") as (journal, store, db):
        ended: list[tuple[list[dict[str, Any]], str | None]] = []
        with write_locked(db):
            turn_thread = threading.Thread(
                target=lambda: ended.append(record_turn_told(journal, "sess_a", 0))
            )
            turn_thread.start()
            # The card's first frame was handed over; the turn's end waits for the lock.
            wait_for(lambda: journal.behind >= 1)
            assert not ended
        turn_thread.join(LONG_BUSY_S)
        [(sent, notice)] = ended
        assert notice is None
        stored = store.sessions.load("sess_a")
        assert list(stored.frames) == sent
        assert [c.parts for c in stored.history] == questions(1)


def test_a_write_that_gives_up_on_the_lock_is_told_at_the_turn_end_and_written_later(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another process holds the write lock past the busy timeout: the turn's frames are
    not stored, its end says so, and the frames (the notice too) are kept and written,
    under their own numbers, with the session's next write once the lock is gone."""
    with journal_on(tmp_path, "sess_a", busy_timeout=0.05) as (journal, store, db):
        with write_locked(db), caplog.at_level(logging.ERROR):
            lost, notice = record_turn_told(journal, "sess_a", 0)
            assert journal.flush(timeout=LONG_BUSY_S)  # the notice could not be stored either
        notice_text = (
            f"\n[the session could not be saved: database is locked ({len(lost)} updates and "
            "the conversation history not stored)]\n"
        )
        assert notice == notice_text
        assert journal.lost_frames == len(lost) + 1
        # The writes gave up on the writer's thread, not on the thread that recorded them.
        not_saved = [r for r in caplog.records if "not saved" in r.getMessage()]
        assert {r.threadName for r in not_saved} == {THREAD_NAME}
        logged = [r.getMessage() for r in not_saved]
        assert any("frames of sess_a were not saved" in m and "locked" in m for m in logged)
        assert any("the history of sess_a was not saved" in m for m in logged)
        later, notice = record_turn_told(journal, "sess_a", 1)
        assert notice is None  # told once
        stored = store.sessions.load("sess_a")
        assert [c.parts for c in stored.history] == questions(2)  # the lost save repaired
        # The lost frames (and the notice) kept their numbers and are stored now: a replay
        # shows what the clients saw, with no gap.
        assert fr.seq_of(later[0]) == len(lost) + 2
        told = fr.numbered(fr.agent_message_chunk(notice_text), len(lost) + 1)
        assert list(stored.frames) == [*lost, told, *later]


def test_close_writes_what_was_handed_over_then_refuses_more(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with journal_on(tmp_path, "sess_a") as (journal, store, db):
        with write_locked(db):
            # A card's frames are handed over as they come (its end is not waited for here).
            sent = [journal.record("sess_a", f) for n in range(10) for f in card(f"call_{n}")]
            assert not journal.close(timeout=0.1)  # still waiting for the lock
        assert journal.close(timeout=LONG_BUSY_S)
        assert list(store.sessions.load("sess_a").frames) == sent
        with caplog.at_level(logging.ERROR):
            _, notice = record_turn_told(journal, "sess_a", 10)  # neither raises nor writes
        assert notice is not None and "the journal is closed" in notice
        assert journal.flush(timeout=0)
        assert list(store.sessions.load("sess_a").frames) == sent
        assert any("the journal is closed" in r.getMessage() for r in caplog.records)


def test_a_failing_write_does_not_stop_the_writer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    with journal_on(tmp_path, "sess_a") as (journal, store, _db):
        real_append = store.frame_log.append_frames
        broken = True

        def append_while_broken(session_id: str, frames: Any) -> int:
            if broken:
                raise RuntimeError("a bug in the store")
            return real_append(session_id, frames)

        monkeypatch.setattr(store.frame_log, "append_frames", append_while_broken)
        with caplog.at_level(logging.ERROR):
            _, notice = record_turn_told(journal, "sess_a", 0)
            # The client hears that the store failed; the log says how.
            assert notice is not None and "the session store failed" in notice
            assert "a bug in the store" not in notice
            assert "RuntimeError: a bug in the store" in caplog.text
            record_turn(journal, "sess_nope", 0)  # never created: a StoreError
            assert journal.flush(timeout=LONG_BUSY_S)
        messages = [r.getMessage() for r in caplog.records]
        assert any("frames of sess_a were not saved" in m for m in messages)
        assert any("the history of sess_nope was not saved" in m for m in messages)
        broken = False
        later = record_turn(journal, "sess_a", 1)
        assert journal.flush(timeout=LONG_BUSY_S)
        assert list(store.sessions.load("sess_a").frames) == later


def test_a_writer_far_behind_slows_the_sessions_and_drops_nothing(tmp_path: Path) -> None:
    """Past ``max_pending`` batches behind, handing over waits for room (bounded memory)
    instead of dropping: once the store takes writes again, every frame is there."""
    with journal_on(tmp_path, "sess_a", max_pending=2) as (journal, store, db):
        sent: list[dict[str, Any]] = []

        def record_cards() -> None:
            for n in range(10):
                sent.extend(journal.record("sess_a", frame) for frame in card(f"call_{n}"))

        producer = threading.Thread(target=record_cards)
        with write_locked(db):
            producer.start()
            # Two batches handed over (the writer waits for the lock with what it took), and
            # the producer waits for room rather than queueing or dropping a third.
            wait_for(lambda: journal.behind == 2 and producer.is_alive())
            assert len(sent) < 20
        producer.join(LONG_BUSY_S)
        assert not producer.is_alive()
        assert journal.flush(timeout=LONG_BUSY_S)
        assert len(sent) == 20
        assert list(store.sessions.load("sess_a").frames) == sent
        assert journal.lost_frames == 0


def test_every_number_is_reserved_in_the_store_before_it_is_given_out(tmp_path: Path) -> None:
    """A long answer with no card (nothing handed to the writer but reservations): each
    number is within the committed high-water mark by the time ``record`` returns it, a
    block is written only every ``RESERVE_BLOCK`` frames or so, and closing settles the mark
    at the last number given out."""
    with (
        journal_on(tmp_path, "sess_a") as (journal, _store, db),
        contextlib.closing(sqlite3.connect(db)) as reader,
    ):

        def reserved() -> int:
            (mark,) = reader.execute(
                "SELECT reserved_seq FROM sessions WHERE id = 'sess_a'"
            ).fetchone()
            return int(mark)

        marks: set[int] = set()
        for n in range(1, 3 * RESERVE_BLOCK):
            seq = fr.seq_of(journal.record("sess_a", fr.agent_message_chunk(f"{n} ")))
            assert seq == n
            mark = reserved()
            assert mark >= n
            marks.add(mark)
        assert len(marks) <= 4
        journal.end_session("sess_a")
        assert journal.flush(timeout=LONG_BUSY_S)
        assert reserved() == 3 * RESERVE_BLOCK - 1


def wait_for(condition: Callable[[], bool]) -> None:
    eventually(condition, timeout=LONG_BUSY_S, interval=0.005, what="the condition never held")


def test_a_runtime_flushes_its_journal_on_request_and_drains_it_at_shutdown(
    tmp_path: Path,
) -> None:
    before = set(threading.enumerate())
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.text_turn(KIND, "One.")))
        with harness(KIND, tmp_path) as h:
            assert h.runtime.flush_journal(timeout=0)  # no store, nothing to wait for
        with SessionStore(tmp_path / "s.db") as store:
            with harness(KIND, tmp_path, store=store, server=server) as h:
                assert journal_threads(before) == 1
                session_id, sink = h.session()
                assert h.turn(session_id, sink).stop_reason == "end_turn"
                assert h.runtime.flush_journal()
                sent = [f for f in sink.frames() if f.get("sessionUpdate") != "__turn_result__"]
                assert list(store.sessions.load(session_id).frames) == sent
            assert journal_threads(before) == 0
