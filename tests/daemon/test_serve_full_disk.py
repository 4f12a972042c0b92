"""``toolprep serve`` whose data directory fills in the middle of a turn (the session's
directory is on the same small disk, and the turn's second card fills it): the frames its
store refused are written once space is back, so after a restart every card replays as the
clients saw it end, and no SQLite text reached a client meanwhile."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.conftest import StartDaemon
from tests.support.eventually import eventually
from tests.support.full_disk import check_replay, fill_in_a_turn, sqlite_text, unended
from tests.support.message_log import Message
from tests.support.runtime_harness import lifecycle
from tests.support.small_disk import SmallDisk, small_disk
from toolprep.runtime.store import SessionStore
from toolprep.testing import FakeProviderServer


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    with small_disk(tmp_path / "disk", size="16m") as mounted:
        yield mounted


def _stored(db: Path, session_id: str) -> list[Message]:
    """The session's frames as the store holds them now, as a replay from it shows them."""
    with SessionStore(db) as store:
        return [dict(frame) for frame in store.sessions.load(session_id).frames]


def test_cards_that_completed_while_the_disk_filled_are_stored_once_space_is_back(
    start_daemon: StartDaemon, provider: FakeProviderServer, disk: SmallDisk
) -> None:
    data, cwd = disk.path / "data", disk.path / "work"
    cwd.mkdir()
    (cwd / "notes.txt").write_text("some notes\n")
    daemon = start_daemon("--data-dir", str(data), "--allow-shell", "--workers", "1")
    client = daemon.client()
    try:
        client.initialize()
        session_id, live = fill_in_a_turn(provider, client, cwd)
        while_full = daemon.loaded(session_id, cwd)  # a second client, while the disk is full
        try:
            assert not unended(while_full.updates(session_id))
        finally:
            while_full.close()
        (cwd / "filler.bin").unlink()

        def stored_completed() -> bool:
            check_replay(_stored(data / "sessions.db", session_id), live)
            return True

        eventually(stored_completed, timeout=60, interval=1.0)
        seen = client.messages + while_full.messages
    finally:
        client.close()
    assert daemon.stop() == 0, daemon.stderr()
    restarted = start_daemon("--data-dir", str(data), "--allow-shell", "--workers", "1")
    after = restarted.loaded(session_id, cwd)
    try:
        replayed = after.updates(session_id)
    finally:
        after.close()
    assert restarted.stop() == 0, restarted.stderr()
    check_replay(replayed, live)
    assert lifecycle(replayed)["call_never"][-1] == "failed"  # it was not run, and says so
    assert not sqlite_text(seen + after.messages)
