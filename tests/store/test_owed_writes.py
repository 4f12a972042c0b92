"""The frames a store refused because it could not be written are kept, within a bound,
and written under their own numbers once it can be: by the session's next write, or by the
store's recovery with nothing else written."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tests.store.test_journal import card, record_turn, record_turn_told
from tests.support.eventually import eventually
from tests.support.sqlite_lock import write_locked
from toolprep.messages import frames as fr
from toolprep.runtime.store import SessionStore
from toolprep.runtime.store.journal import StoreJournal

BUSY_S = 0.05
WAIT_S = 30.0


def _journal(store: SessionStore, tmp_path: Path, max_owed_bytes: int) -> StoreJournal:
    store.sessions.create("sess_a", str(tmp_path))
    journal = StoreJournal(store, max_owed_bytes=max_owed_bytes)
    journal.start_session("sess_a", 0)
    return journal


def _replay(store: SessionStore) -> list[dict[str, object]]:
    return [json.loads(frame) for frame in store.frame_log.encoded_frames("sess_a")]


def test_refused_frames_are_written_once_the_store_recovers_with_nothing_else_written(
    tmp_path: Path,
) -> None:
    with SessionStore(tmp_path / "s.db", busy_timeout=BUSY_S) as store:
        journal = _journal(store, tmp_path, 1 << 20)
        try:
            with write_locked(store.path):
                lost, notice = record_turn_told(journal, "sess_a", 0)
                assert notice is not None
                assert journal.flush(timeout=WAIT_S)
            assert store.database.read_only_cause == "database is locked"

            def written() -> bool:  # by the store's own retry, every few seconds
                assert [f for f in _replay(store) if fr.seq_of(f) in (1, 2, 3)] == lost
                return True

            eventually(written, timeout=WAIT_S, interval=0.2)
            assert store.database.read_only_cause is None
        finally:
            assert journal.close(timeout=WAIT_S)


def test_past_the_bound_refused_frames_stay_a_gap(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with SessionStore(tmp_path / "s.db", busy_timeout=BUSY_S) as store:
        journal = _journal(store, tmp_path, 4096)
        try:
            with write_locked(store.path), caplog.at_level(logging.ERROR):
                kept = [journal.record("sess_a", f) for f in card("call_kept")]
                assert journal.flush(timeout=WAIT_S)
                big = fr.agent_message_chunk("x" * 8192)  # past the bound: not kept
                dropped = [journal.record("sess_a", f) for f in [big, *card("call_dropped")]]
                assert journal.flush(timeout=WAIT_S)
            later = record_turn(journal, "sess_a", 1)  # carries what was kept
            assert journal.flush(timeout=WAIT_S)
            replay = _replay(store)
        finally:
            assert journal.close(timeout=WAIT_S)
    assert "are not kept to be written later" in caplog.text
    assert replay[: len(kept)] == kept
    after = fr.seq_of(kept[-1])
    assert after is not None
    assert replay[len(kept)] == fr.gap_mark(len(dropped), after)
    assert [
        f for f in replay[len(kept) + 1 :] if f.get("sessionUpdate") != "agent_message_chunk"
    ] == [f for f in later if f.get("sessionUpdate") != "agent_message_chunk"]
