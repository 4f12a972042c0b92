"""``Retention``: sessions untouched past the retention period are deleted, unless a live
process serves them, and the pages they took are given back to the file system."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path

import pytest

from toolprep.messages import frames as fr
from toolprep.runtime.store import SessionStore
from toolprep.runtime.store.errors import SessionNotStored
from toolprep.runtime.store.retention import SWEEP_BATCH, Retention

DAY = 86400.0


def _age(db: Path, days: float, *session_ids: str) -> None:
    """Make the sessions look last updated ``days`` ago, as another process could see it."""
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as other:
        other.executemany(
            "UPDATE sessions SET updated_at = ? WHERE id = ?",
            [(time.time() - days * DAY, session_id) for session_id in session_ids],
        )


def test_a_sweep_deletes_only_unserved_sessions_past_retention_and_gives_back_their_pages(
    tmp_path: Path,
) -> None:
    db = tmp_path / "sessions.db"
    with SessionStore(db) as store:
        for session_id in ("old_1", "old_2", "old_served", "recent"):
            store.sessions.create(session_id, "/work")
            store.frame_log.append_frames(session_id, [fr.agent_message_chunk("x" * 300_000)])
            store.claims.release(session_id)
    size_before = db.stat().st_size  # checkpointed at close
    _age(db, 10, "old_1", "old_2", "old_served")
    _age(db, 2, "recent")

    with SessionStore(db) as store:
        store.claims.claim("old_served")  # open in this (live) process: never swept
        result = Retention(store, retain_s=7 * DAY).sweep()
        assert result.deleted == 2
        assert result.pages_reclaimed > 0
        assert store.database.free_pages == 0
        listed, _ = store.sessions.list_sessions()
        assert {info.session_id for info in listed} == {"old_served", "recent"}
        for gone in ("old_1", "old_2"):
            with pytest.raises(SessionNotStored):
                store.sessions.info(gone)
        # Swept again, nothing changes: what is left is served or within its retention.
        assert Retention(store, retain_s=7 * DAY).sweep().deleted == 0
    assert db.stat().st_size < size_before * 0.75


def test_more_served_sessions_than_a_batch_do_not_hide_the_ones_to_delete(
    tmp_path: Path,
) -> None:
    db = tmp_path / "sessions.db"
    served = [f"served_{n}" for n in range(SWEEP_BATCH + 1)]
    with SessionStore(db) as store:
        for session_id in [*served, "unserved"]:
            store.sessions.create(session_id, "/work")  # created here: claimed by this process
        store.claims.release("unserved")
        _age(db, 20, *served)  # older than the one to delete: each batch finds them first
        _age(db, 10, "unserved")
        assert Retention(store, retain_s=7 * DAY).sweep().deleted == 1
        with pytest.raises(SessionNotStored):
            store.sessions.info("unserved")
        assert len(store.sessions.list_sessions(limit=SWEEP_BATCH + 5)[0]) == len(served)


def test_a_retention_period_must_be_positive(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "sessions.db") as store:
        for bad in (0.0, -1.0, float("nan")):
            with pytest.raises(ValueError, match="retention period must be > 0"):
                Retention(store, retain_s=bad)
