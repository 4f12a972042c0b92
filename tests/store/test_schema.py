"""Schema migration when several processes open a new session database at once."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from toolprep.runtime.store.schema import MIGRATIONS, SCHEMA_VERSION, migrate

DEADLINE_S = 30.0


def _connect(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(
        path, timeout=DEADLINE_S, isolation_level=None, check_same_thread=False
    )
    connection.execute("PRAGMA journal_mode = WAL")
    return connection


def test_a_step_another_connection_took_while_this_one_waited_is_not_taken_again(
    tmp_path: Path,
) -> None:
    """The second opener read version 0, then waited for the write lock while the first
    migrated; once it gets the lock it must find the step done, not run it again."""
    path = tmp_path / "sessions.db"
    first, second = _connect(path), _connect(path)
    waiting = threading.Event()
    second.set_trace_callback(lambda sql: waiting.set() if sql == "BEGIN IMMEDIATE" else None)
    outcome: list[BaseException | int] = []

    def open_second() -> None:
        try:
            outcome.append(migrate(second))
        except BaseException as exc:
            outcome.append(exc)

    try:
        first.execute("BEGIN IMMEDIATE")  # the first opener is migrating
        opener = threading.Thread(target=open_second)
        opener.start()
        assert waiting.wait(DEADLINE_S)  # the second read version 0 and wants the lock
        for statement in MIGRATIONS[0].split(";"):
            if statement.strip():
                first.execute(statement)
        first.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        first.execute("COMMIT")
        opener.join(DEADLINE_S)
        assert outcome == [0]
        assert second.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    finally:
        first.close()
        second.close()
