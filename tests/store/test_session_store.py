"""``SessionStore`` on a real SQLite file: what is written survives, bad files fail clearly."""

from __future__ import annotations

import os
import re
import socket
import sqlite3
from pathlib import Path

import orjson
import pytest
from freezegun import freeze_time

from tests.support.acp_schema import validate_update
from tests.support.degraded_store import NUMBERED_TURN, TURN, dead_owner
from tests.support.runtime_harness import check_cards, lifecycle
from toolprep.messages import frames as fr
from toolprep.messages.content import (
    Content,
    FunctionCall,
    FunctionCallPart,
    FunctionResponse,
    FunctionResponsePart,
    TextPart,
    ThoughtPart,
)
from toolprep.runtime.kernel.session_host import UnknownSession
from toolprep.runtime.store import SessionOwnedElsewhere, SessionStore, StoreError
from toolprep.runtime.store.schema import MIGRATIONS, SCHEMA_VERSION

HISTORY = (
    Content("user", (TextPart("  Fix   the\nbuild please "),)),
    Content(
        "model",
        (
            ThoughtPart("let me look", signature="sig"),
            FunctionCallPart(FunctionCall("call_1", "read_file", {"path": "setup.cfg"})),
        ),
    ),
    Content(
        "user", (FunctionResponsePart(FunctionResponse("call_1", "read_file", {"output": "x"})),)
    ),
    Content("model", (TextPart("Done."),)),
)


_SERVED_HERE = (
    rf"session sess_live is served by another live toolprep process "
    rf"\(pid {os.getpid()} on {re.escape(socket.gethostname())}\)"
)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "data" / "sessions.db"


def test_a_session_survives_reopening_the_file(db: Path) -> None:
    with SessionStore(db) as store:
        store.sessions.create("sess_1", "/work", model="claude")
        store.frame_log.append_frames("sess_1", TURN[:2])
        store.frame_log.append_frames("sess_1", TURN[2:])
        store.sessions.save_history("sess_1", HISTORY)
    with SessionStore(db) as store:
        loaded = store.sessions.load("sess_1")
    assert loaded.history == HISTORY
    assert list(loaded.frames) == NUMBERED_TURN
    assert (loaded.info.cwd, loaded.info.model) == ("/work", "claude")
    assert loaded.info.title == "Fix the build please"


def test_the_cards_a_session_opened_are_known_and_a_damaged_row_does_not_stop_it(
    db: Path,
) -> None:
    with SessionStore(db) as store:
        store.sessions.create("sess_1", "/work")
        store.sessions.create("sess_2", "/work")
        store.frame_log.append_frames("sess_1", TURN)
        store.frame_log.append_frames("sess_1", [fr.preparing("call_2", "grep", "search")])
        store.frame_log.append_frames("sess_2", [fr.preparing("call_other", "ls", "read")])
    with sqlite3.connect(db) as raw:
        raw.execute("INSERT INTO frames VALUES ('sess_1', 99, CAST('{not json' AS BLOB))")
    raw.close()
    with SessionStore(db) as store:
        assert store.frame_log.shown_call_ids("sess_1") == {"call_1", "call_2"}
        assert store.frame_log.shown_call_ids("sess_2") == {"call_other"}


def test_cards_left_open_by_a_crash_get_their_discard_on_restart(db: Path) -> None:
    with SessionStore(db, owner=dead_owner()) as store:
        store.sessions.create("sess_1", "/work")
        store.frame_log.append_frames("sess_1", TURN)  # a finished turn
        store.frame_log.append_frames("sess_1", [fr.preparing("call_2", "grep", "search")])
        store.frame_log.append_frames("sess_1", [fr.preparing("call_3", "ls", "read")])
    # The process died here; the next one starts by closing what it left open.
    with SessionStore(db) as store:
        assert store.cards.close_open_cards() == 2
        assert store.cards.close_open_cards() == 0
        frames = list(store.sessions.load("sess_1").frames)
    assert lifecycle(frames) == {
        "call_1": ["preparing", "in_progress", "completed"],
        "call_2": ["preparing", "discarded"],
        "call_3": ["preparing", "discarded"],
    }
    check_cards(frames)


def test_a_card_whose_start_was_stored_is_interrupted_not_unrun(db: Path) -> None:
    """A call whose ``in_progress`` frame is in the log may have run when its process died:
    its discard says so (``interrupted``); one that never started is ``crash``, not run."""
    started = fr.execution_started(
        "call_w",
        "write_file",
        title="Write a.txt",
        kind="edit",
        locations=[],
        raw_input={"path": "a.txt"},
        prepared=True,
    )
    with SessionStore(db, owner=dead_owner()) as store:
        store.sessions.create("sess_1", "/work")
        store.frame_log.append_frames(
            "sess_1", [fr.preparing("call_w", "write_file", "edit"), started]
        )
        store.frame_log.append_frames("sess_1", [fr.preparing("call_x", "write_file", "edit")])
    with SessionStore(db) as store:
        assert store.cards.close_open_cards() == 2
        frames = list(store.sessions.load("sess_1").frames)
    check_cards(frames)
    ends = {f["toolCallId"]: f for f in frames if f.get("status") == "failed"}
    assert ends["call_w"]["_meta"]["discardReason"] == "interrupted"
    assert ends["call_w"]["title"] == (
        "write_file: interrupted, it may have run (the agent stopped before it ended)"
    )
    assert ends["call_x"]["_meta"]["discardReason"] == "crash"
    assert ends["call_x"]["title"] == "write_file: not run, the agent stopped unexpectedly"
    assert [fr.seq_of(f) for f in frames] == [1, 2, 3, 4, 5]


def test_a_replay_resumes_after_a_frame_and_marks_frames_the_log_lacks(db: Path) -> None:
    with SessionStore(db) as store:
        store.sessions.create("sess_1", "/work")
        store.frame_log.append_frames("sess_1", NUMBERED_TURN[:2])
        store.frame_log.append_frames("sess_1", NUMBERED_TURN[3:])  # frame 3 was never stored
        assert store.frame_log.last_seq("sess_1") == 4
        replay = [orjson.loads(f) for f in store.frame_log.encoded_frames("sess_1")]
        assert replay == [*NUMBERED_TURN[:2], fr.gap_mark(1, 2), NUMBERED_TURN[3]]
        assert "[1 update was not saved here" in replay[2]["content"]["text"]
        for frame in replay:  # the gap mark too is a valid ACP session update
            validate_update(frame)
        after_1 = [orjson.loads(f) for f in store.frame_log.encoded_frames("sess_1", after_seq=1)]
        assert after_1 == [NUMBERED_TURN[1], fr.gap_mark(1, 2), NUMBERED_TURN[3]]
        after_4 = store.frame_log.encoded_frames("sess_1", after_seq=4)
        assert after_4 == ()
        with pytest.raises(StoreError, match=r"their numbers \(4 to 4\) are taken"):
            store.frame_log.append_frames("sess_1", NUMBERED_TURN[3:])


def test_a_part_of_the_log_ends_where_asked_and_marks_what_it_lacks_there(db: Path) -> None:
    """What a live session's replay reads of the turns it no longer keeps in memory."""
    with SessionStore(db) as store:
        store.sessions.create("sess_1", "/work")
        store.frame_log.append_frames("sess_1", NUMBERED_TURN[:1])
        store.frame_log.append_frames("sess_1", NUMBERED_TURN[3:])  # 2 and 3 never stored

        def part(after_seq: int, through_seq: int) -> list[dict[str, object]]:
            encoded = store.frame_log.encoded_frames("sess_1", after_seq, through_seq)
            return [orjson.loads(f) for f in encoded]

        assert part(0, 1) == NUMBERED_TURN[:1]
        assert part(0, 2) == [NUMBERED_TURN[0], fr.gap_mark(1, 1)]  # missing at the end
        assert part(0, 4) == [NUMBERED_TURN[0], fr.gap_mark(2, 1), NUMBERED_TURN[3]]
        assert part(1, 4) == [fr.gap_mark(2, 1), NUMBERED_TURN[3]]
        assert part(3, 4) == NUMBERED_TURN[3:] and part(4, 4) == []


def test_numbers_reserved_and_never_stored_are_marked_and_never_reused(db: Path) -> None:
    """A process that reserved numbers and died having stored fewer: the next one numbers on
    after every reserved number, behind a stored gap mark for them (as a bound); a replay
    of a session nobody serves marks a tail it lacks too, and exactly once it was closed."""
    with SessionStore(db, owner=dead_owner()) as store:
        store.sessions.create("sess_1", "/work")
        store.frame_log.reserve_seq("sess_1", 256)
        store.frame_log.append_frames("sess_1", NUMBERED_TURN[:2])  # 3 and 4 shown, never stored
    with SessionStore(db) as store:
        tail = [orjson.loads(f) for f in store.frame_log.encoded_frames("sess_1")]
        assert tail == [*NUMBERED_TURN[:2], fr.gap_mark(254, 2, "stopped")]
        assert tail[-1]["content"]["text"] == (
            "\n[up to 254 updates were not saved here: the agent stopped before they were stored]\n"
        )
        store.claims.claim("sess_1")
        assert store.frame_log.resume_seq("sess_1") == 257
        assert store.frame_log.resume_seq("sess_1") == 257  # marked once
        store.frame_log.append_frames("sess_1", [fr.numbered(TURN[3], 258)])
        replay = [orjson.loads(f) for f in store.frame_log.encoded_frames("sess_1", after_seq=4)]
        mark = fr.numbered(fr.gap_mark(254, 2, "stopped"), 257)
        assert replay == [mark, fr.numbered(TURN[3], 258)]
        assert fr.seq_of_encoded(orjson.dumps(mark)) == 257
        for frame in [*tail, *replay]:
            validate_update(frame)
        # Closed with frame 260 shown last and 259 and 260 refused: an exact tail.
        store.frame_log.settle_seq("sess_1", 260)
        store.claims.release("sess_1")
        closed = [orjson.loads(f) for f in store.frame_log.encoded_frames("sess_1", after_seq=258)]
        assert closed == [fr.gap_mark(2, 258)]
        assert store.frame_log.resume_seq("sess_1") == 261


def test_a_database_from_before_reserved_numbers_reserves_what_it_stored(db: Path) -> None:
    db.parent.mkdir(parents=True, exist_ok=True)
    raw = sqlite3.connect(db, isolation_level=None)
    for version in range(3):
        raw.executescript(MIGRATIONS[version])
    raw.execute("PRAGMA user_version = 3")
    raw.execute(
        "INSERT INTO sessions (id, cwd, model, created_at, updated_at, owner) "
        "VALUES ('sess_old', '/work', 'm', 1, 1, NULL)"
    )
    for seq, frame in enumerate(NUMBERED_TURN, 1):
        raw.execute("INSERT INTO frames VALUES ('sess_old', ?, ?)", (seq, orjson.dumps(frame)))
    raw.close()
    with SessionStore(db) as store:
        assert [
            orjson.loads(f) for f in store.frame_log.encoded_frames("sess_old")
        ] == NUMBERED_TURN
        assert store.frame_log.resume_seq("sess_old") == len(NUMBERED_TURN)


def test_a_database_from_before_numbered_frames_numbers_them(db: Path) -> None:
    """Frames stored before they carried their number get it (their place in the log) and
    an open card from then counts as not started."""
    db.parent.mkdir(parents=True, exist_ok=True)
    raw = sqlite3.connect(db, isolation_level=None)
    for version in (0, 1):
        raw.executescript(MIGRATIONS[version])
    raw.execute("PRAGMA user_version = 2")
    raw.execute(
        "INSERT INTO sessions (id, cwd, model, created_at, updated_at, owner) "
        "VALUES ('sess_old', '/work', 'm', 1, 1, ?)",
        (dead_owner(),),
    )
    for seq, frame in enumerate(TURN, 1):
        raw.execute("INSERT INTO frames VALUES ('sess_old', ?, ?)", (seq, orjson.dumps(frame)))
    raw.execute("INSERT INTO open_cards VALUES ('sess_old', 'call_9', 'write_file')")
    raw.close()
    with SessionStore(db) as store:
        assert [
            orjson.loads(f) for f in store.frame_log.encoded_frames("sess_old")
        ] == NUMBERED_TURN
        assert store.cards.close_open_cards() == 1
        frames = list(store.sessions.load("sess_old").frames)
    assert frames[:4] == NUMBERED_TURN
    assert frames[4]["_meta"]["discardReason"] == "crash"
    assert fr.seq_of(frames[4]) == 5


def test_listing_pages_newest_first_and_filters_by_cwd(db: Path) -> None:
    with SessionStore(db) as store:
        for n in range(5):
            with freeze_time(f"2026-01-0{n + 1}"):
                store.sessions.create(f"sess_{n}", "/a" if n % 2 == 0 else "/b")
        first, cursor = store.sessions.list_sessions(limit=2)
        assert [i.session_id for i in first] == ["sess_4", "sess_3"]
        assert cursor is not None
        second, cursor = store.sessions.list_sessions(cursor=cursor, limit=2)
        assert [i.session_id for i in second] == ["sess_2", "sess_1"]
        last, cursor = store.sessions.list_sessions(cursor=cursor, limit=2)
        assert [i.session_id for i in last] == ["sess_0"] and cursor is None
        in_a, _ = store.sessions.list_sessions(cwd="/a")
        assert [i.session_id for i in in_a] == ["sess_4", "sess_2", "sess_0"]
        with pytest.raises(ValueError, match="not a session list cursor"):
            store.sessions.list_sessions(cursor="garbage!")


def test_a_deleted_session_is_gone_and_its_id_never_comes_back(db: Path) -> None:
    with SessionStore(db) as store:
        store.sessions.create("sess_1", "/work")
        store.frame_log.append_frames("sess_1", TURN)
        store.sessions.delete("sess_1")
        with pytest.raises(UnknownSession, match="Session not found: sess_1"):
            store.sessions.load("sess_1")
        with pytest.raises(StoreError, match="sess_1 was already used"):
            store.sessions.create("sess_1", "/work")
        assert store.sessions.list_sessions() == ([], None)
        with pytest.raises(UnknownSession):
            store.frame_log.append_frames("sess_1", TURN)
        with pytest.raises(UnknownSession):
            store.sessions.load("sess_never")


def test_a_file_that_is_not_a_database_is_refused_by_name(db: Path) -> None:
    db.parent.mkdir(parents=True)
    db.write_bytes(b"this is not sqlite at all, just text" * 100)
    with pytest.raises(StoreError, match=r"cannot open the session database .*sessions.db"):
        SessionStore(db)
    assert db.read_bytes().startswith(b"this is not sqlite")  # nothing overwritten


def test_a_database_from_a_newer_toolprep_is_refused(db: Path) -> None:
    with SessionStore(db):
        pass
    raw = sqlite3.connect(db)
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.close()
    with pytest.raises(StoreError, match="a newer toolprep wrote it"):
        SessionStore(db)


def test_a_database_from_before_modes_gains_them_and_keeps_its_sessions(db: Path) -> None:
    db.parent.mkdir(parents=True, exist_ok=True)
    raw = sqlite3.connect(db, isolation_level=None)
    raw.executescript(MIGRATIONS[0])
    raw.execute("PRAGMA user_version = 1")
    raw.execute(
        "INSERT INTO sessions (id, cwd, model, created_at, updated_at) "
        "VALUES ('sess_old', '/work', 'm', 1, 1)"
    )
    raw.close()
    with SessionStore(db) as store:
        assert store.sessions.mode_of("sess_old") is None  # the runtime's default applies
        store.sessions.set_mode("sess_old", "plan")
        assert store.sessions.mode_of("sess_old") == "plan"
        assert store.sessions.load("sess_old").info.model == "m"
    raw = sqlite3.connect(db)
    try:
        assert raw.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    finally:
        raw.close()


def test_a_locked_database_fails_the_write_clearly_and_loses_nothing(db: Path) -> None:
    with SessionStore(db, busy_timeout=0.2) as store:
        store.sessions.create("sess_1", "/work")
        store.frame_log.append_frames("sess_1", TURN[:1])
        holder = sqlite3.connect(db, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        try:
            with pytest.raises(StoreError, match=r"cannot record frames of sess_1 in .*locked"):
                store.frame_log.append_frames("sess_1", TURN[1:])
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        store.frame_log.append_frames("sess_1", TURN[1:])
        assert list(store.sessions.load("sess_1").frames) == NUMBERED_TURN


def test_a_damaged_history_fails_the_load_by_name(db: Path) -> None:
    with SessionStore(db) as store:
        store.sessions.create("sess_1", "/work")
    raw = sqlite3.connect(db)
    raw.execute("INSERT INTO history VALUES ('sess_1', 0, ?)", (b'{"role": "user"}',))
    raw.commit()
    raw.close()
    with SessionStore(db) as store, pytest.raises(StoreError, match=r"sess_1 .* is damaged"):
        store.sessions.load("sess_1")


def test_history_grows_at_its_end_and_can_be_cut_back_to_a_turn_start(db: Path) -> None:
    with SessionStore(db) as store:
        store.sessions.create("sess_1", "/work")
        store.sessions.save_history("sess_1", HISTORY[:2])
        store.sessions.save_history("sess_1", HISTORY)  # the next turn appended
        assert store.sessions.load("sess_1").history == HISTORY
        store.sessions.save_history(
            "sess_1", HISTORY[:1]
        )  # a cancelled turn dropped its dangling call
        assert store.sessions.load("sess_1").history == HISTORY[:1]
        store.sessions.save_history("sess_1", (*HISTORY[:1], HISTORY[3]))
        assert store.sessions.load("sess_1").history == (HISTORY[0], HISTORY[3])
        assert store.sessions.load("sess_1").info.title == "Fix the build please"


def test_only_cards_of_processes_that_are_gone_are_discarded(db: Path) -> None:
    card = [fr.preparing("call_1", "grep", "search")]
    with SessionStore(db, owner=dead_owner()) as crashed:
        crashed.sessions.create("sess_dead", "/work")
        crashed.frame_log.append_frames("sess_dead", card)
    with SessionStore(db) as serving, SessionStore(db, owner="elsewhere:1:1") as starting:
        serving.sessions.create("sess_live", "/work")  # served by this (live) test process
        serving.frame_log.append_frames("sess_live", card)
        assert starting.cards.close_open_cards() == 1  # the dead owner's card only
        assert (
            lifecycle(list(starting.sessions.load("sess_dead").frames))["call_1"][-1] == "discarded"
        )
        assert lifecycle(list(starting.sessions.load("sess_live").frames)) == {
            "call_1": ["preparing"]
        }
        with pytest.raises(SessionOwnedElsewhere, match=_SERVED_HERE):
            starting.claims.claim("sess_live")
        starting.claims.claim("sess_dead")  # nobody serves it: the new process takes it over
        serving.claims.release("sess_live")
        starting.claims.claim("sess_live")
        assert starting.cards.close_open_cards("sess_live") == 1  # claimed to be opened again


def test_a_session_a_live_process_serves_cannot_be_deleted_by_another(db: Path) -> None:
    with SessionStore(db, owner=dead_owner()) as crashed:
        crashed.sessions.create("sess_dead", "/work")
    with SessionStore(db) as serving, SessionStore(db, owner="elsewhere:1:1") as other:
        serving.sessions.create("sess_live", "/work")  # served by this (live) test process
        with pytest.raises(SessionOwnedElsewhere, match=_SERVED_HERE):
            other.sessions.delete("sess_live")
        assert (
            serving.sessions.info("sess_live").session_id == "sess_live"
        )  # still there, untouched
        other.sessions.delete("sess_dead")  # its process is gone: anyone may delete it
        serving.claims.release("sess_live")
        other.sessions.delete("sess_live")  # released: no longer served
        with pytest.raises(UnknownSession):
            other.sessions.info("sess_live")
