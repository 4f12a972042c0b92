"""``toolprep serve --retain-days``: the daemon deletes what nobody touched for that long."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path

from tests.daemon.conftest import StartDaemon
from tests.support.eventually import eventually
from toolprep.messages import frames as fr
from toolprep.runtime.store import SessionStore

DAY = 86400.0


def test_sessions_untouched_past_retention_are_deleted_and_the_others_kept(
    start_daemon: StartDaemon, workdir: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    db = data / "sessions.db"
    with SessionStore(db) as store:  # what earlier daemons left
        for session_id in ("sess_old", "sess_recent"):
            store.sessions.create(session_id, str(workdir))
            store.frame_log.append_frames(session_id, [fr.agent_message_chunk("kept a while")])
            store.claims.release(session_id)
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as other:
        ages = [(time.time() - 30 * DAY, "sess_old"), (time.time() - 3 * DAY, "sess_recent")]
        other.executemany("UPDATE sessions SET updated_at = ? WHERE id = ?", ages)

    daemon = start_daemon(
        "--data-dir", str(data), "--workers", "1", "--retain-days", "7", "--log-level", "INFO"
    )
    client = daemon.client()
    try:
        client.initialize()

        def swept() -> list[str]:
            listed = client.result(client.request("session/list", {}))["sessions"]
            ids = [session["sessionId"] for session in listed]
            assert ids == ["sess_recent"], ids
            return ids

        eventually(swept, timeout=60)
        assert client.load("sess_old", workdir)["error"]["code"] == -32002
        assert "result" in client.load("sess_recent", workdir)
    finally:
        client.close()
    assert daemon.stop() == 0
    assert "retention: deleted 1 sessions untouched for 7 days" in daemon.stderr()
