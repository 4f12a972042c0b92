"""A store that cannot be written opens read-only, refuses new sessions by cause, and
recovers (writing the crash discards it owes) once the disk takes writes again."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.support.degraded_store import NUMBERED_TURN, TURN, crashed_session, dead_owner
from tests.support.runtime_harness import lifecycle
from tests.support.small_disk import SmallDisk, small_disk
from tests.support.sqlite_lock import write_locked
from toolprep.messages import frames as fr
from toolprep.runtime.store import SessionStore
from toolprep.runtime.store.errors import SessionStoreReadOnly, StoreError

REFUSED = (
    r"^the session store is read-only: (?P<cause>.+); new turns are refused until it "
    r"can be written$"
)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    with small_disk(tmp_path / "disk") as mounted:
        yield mounted


def _check_degraded_then_recovered(db: Path, clear: SmallDisk, how: str) -> None:
    with SessionStore(db) as store:
        assert store.database.read_only_cause is not None
        # Listing and loading work; nothing is claimed or closed yet.
        assert [s.session_id for s in store.sessions.list_sessions()[0]] == ["sess_1"]
        assert list(store.sessions.load("sess_1").frames)[: len(TURN)] == NUMBERED_TURN
        store.claims.claim("sess_1")  # checked, not written
        assert store.cards.close_open_cards() == 0  # owed
        with pytest.raises(SessionStoreReadOnly, match=REFUSED) as refused:
            store.sessions.create("sess_2", "/work")
        assert refused.value.cause == store.database.read_only_cause
        with pytest.raises(SessionStoreReadOnly, match=REFUSED):
            store.recovery.require_writable()  # tried again: still refused

        getattr(clear, how)()
        store.recovery.require_writable()
        assert store.database.read_only_cause is None
        # The discard owed since start-up was written on the way.
        assert lifecycle(list(store.sessions.load("sess_1").frames))["call_2"] == [
            "preparing",
            "discarded",
        ]
        store.sessions.create("sess_2", "/work")
        store.frame_log.append_frames("sess_2", TURN)
    with SessionStore(db) as store:
        assert list(store.sessions.load("sess_2").frames) == NUMBERED_TURN


def test_a_full_disk_opens_read_only_and_recovers_when_space_is_freed(
    disk: SmallDisk, caplog: pytest.LogCaptureFixture
) -> None:
    db = disk.path / "sessions.db"
    crashed_session(db)
    disk.fill()
    with caplog.at_level(logging.WARNING, logger="toolprep.runtime.store.recovery"):
        _check_degraded_then_recovered(db, disk, "free")
    messages = [r.getMessage() for r in caplog.records]
    assert any("cannot be written" in m and "sessions can be listed" in m for m in messages)
    assert any("can be written again" in m for m in messages)


def test_a_read_only_file_system_opens_read_only_and_recovers_when_writable(
    disk: SmallDisk,
) -> None:
    db = disk.path / "sessions.db"
    crashed_session(db)
    disk.read_only()
    _check_degraded_then_recovered(db, disk, "writable")


def test_a_disk_that_fills_while_open_makes_the_store_read_only(disk: SmallDisk) -> None:
    db = disk.path / "sessions.db"
    with SessionStore(db) as store:
        store.sessions.create("sess_1", "/work")
        assert store.database.read_only_cause is None
        disk.fill()
        with pytest.raises(Exception, match="full"):
            for n in range(10_000):  # until the write-ahead log needs a page it cannot get
                store.frame_log.append_frames(
                    "sess_1", [fr.agent_message_chunk("x" * 4000 + str(n))]
                )
        assert store.database.read_only_cause == "the disk is full"
        with pytest.raises(SessionStoreReadOnly, match="read-only: the disk is full"):
            store.sessions.create("sess_2", "/work")
        disk.free()
        store.sessions.create("sess_2", "/work")
        assert store.database.read_only_cause is None


def test_a_large_write_on_a_full_disk_is_refused_as_full(disk: SmallDisk) -> None:
    """A write too large for what is left fails with the transaction rolled back by SQLite
    itself: the error still says the disk is full (not that there was nothing to roll back),
    and the store turns read-only as for any full disk."""
    db = disk.path / "sessions.db"
    with SessionStore(db) as store:
        store.sessions.create("sess_1", "/work")
        disk.fill()
        output = fr.agent_message_chunk("x" * 400_000)  # a long tool output, say
        with pytest.raises(StoreError) as refused:
            store.frame_log.append_frames("sess_1", [output] * 5)  # past what is left
        assert str(refused.value).endswith("database or disk is full"), refused.value
        assert refused.value.cause == "the disk is full"  # as clients hear it
        assert store.database.read_only_cause == "the disk is full"
        disk.free()
        store.sessions.create("sess_2", "/work")
        assert store.database.read_only_cause is None


def test_a_missing_store_on_a_read_only_disk_opens_empty_and_is_made_once_it_can_be(
    disk: SmallDisk,
) -> None:
    db = disk.path / "sessions.db"
    disk.read_only()
    with SessionStore(db) as store:
        assert store.database.read_only_cause == "Read-only file system"
        assert store.sessions.list_sessions() == ([], None)
        with pytest.raises(SessionStoreReadOnly, match="read-only: Read-only file system"):
            store.sessions.create("sess_1", "/work")
        assert not db.exists()
        disk.writable()
        store.sessions.create("sess_1", "/work")
        assert [s.session_id for s in store.sessions.list_sessions()[0]] == ["sess_1"]
    with SessionStore(db) as store:  # kept in the file, not in memory
        assert [s.session_id for s in store.sessions.list_sessions()[0]] == ["sess_1"]


def test_a_missing_store_reads_the_file_another_process_made_meanwhile(
    disk: SmallDisk,
) -> None:
    db = disk.path / "sessions.db"
    disk.read_only()
    with SessionStore(db) as reader:
        assert reader.sessions.list_sessions() == ([], None)
        disk.writable()
        with SessionStore(db) as writer:  # a worker of the same daemon, say
            writer.sessions.create("sess_1", "/work")
        assert [s.session_id for s in reader.sessions.list_sessions()[0]] == ["sess_1"]
        assert reader.database.read_only_cause is not None  # until its own probe finds out


@pytest.mark.parametrize(("level", "pragma"), [("normal", 1), ("full", 2)])
def test_the_durability_level_is_sqlites_synchronous_pragma(
    tmp_path: Path, level: str, pragma: int
) -> None:
    db = tmp_path / "sessions.db"
    with SessionStore(db, synchronous=level) as store:  # type: ignore[arg-type]
        (found,) = store.database._connection.execute("PRAGMA synchronous").fetchone()
    assert found == pragma


def test_an_unknown_durability_level_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="synchronous must be one of normal, full, got 'off'"):
        SessionStore(tmp_path / "sessions.db", synchronous="off")  # type: ignore[arg-type]


def test_a_store_another_process_locks_at_start_opens_read_only(tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"
    crashed_session(db)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        with SessionStore(db, busy_timeout=0.2) as store:
            assert store.database.read_only_cause == "database is locked"
            assert [s.session_id for s in store.sessions.list_sessions()[0]] == ["sess_1"]
            with pytest.raises(SessionStoreReadOnly, match="read-only: database is locked"):
                store.sessions.create("sess_2", "/work")
            holder.execute("ROLLBACK")
            store.sessions.create("sess_2", "/work")
    finally:
        holder.close()


def test_a_lock_taken_after_start_refuses_new_sessions_and_lists_still(tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"
    crashed_session(db)
    with SessionStore(db, busy_timeout=0.2) as store:
        assert store.database.read_only_cause is None
        with write_locked(db):  # another process takes the write lock now
            assert [s.session_id for s in store.sessions.list_sessions()[0]] == ["sess_1"]
            with pytest.raises(SessionStoreReadOnly, match="read-only: database is locked"):
                store.sessions.create("sess_2", "/work")
        store.sessions.create("sess_2", "/work")


def test_numbers_a_read_only_store_could_not_mark_are_marked_once_it_recovers(
    tmp_path: Path,
) -> None:
    """A session reopened while the store cannot be written numbers on past a number kept
    for the mark of what its last process reserved and never stored; the mark is written
    there once the store recovers, so no replay counts those numbers as exact."""
    db = tmp_path / "sessions.db"
    with SessionStore(db, owner=dead_owner()) as store:
        store.sessions.create("sess_1", "/work")
        store.frame_log.reserve_seq("sess_1", 256)
        store.frame_log.append_frames("sess_1", NUMBERED_TURN[:2])
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        with SessionStore(db, busy_timeout=0.2) as store:
            assert store.database.read_only_cause == "database is locked"
            assert store.frame_log.resume_seq("sess_1") == 257
            holder.execute("ROLLBACK")
            store.recovery.require_writable()
            store.frame_log.append_frames("sess_1", [fr.numbered(TURN[3], 258)])
            replay = [
                orjson.loads(f) for f in store.frame_log.encoded_frames("sess_1", after_seq=2)
            ]
    finally:
        holder.close()
    mark = fr.numbered(fr.gap_mark(254, 2, "stopped"), 257)
    assert replay == [mark, fr.numbered(TURN[3], 258)]
