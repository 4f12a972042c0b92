"""The session database's schema and how an older file is brought up to date.

``PRAGMA user_version`` holds the schema version. Each migration takes the
database from version ``n`` to ``n + 1`` inside one transaction, so a file is
either fully migrated or untouched, and several processes may open a new
file at once; a file newer than this code is refused rather than guessed at.
"""

from __future__ import annotations

import sqlite3

MIGRATIONS: tuple[str, ...] = (
    # 0 -> 1: sessions, their model-visible history (one row per entry), the frames sent
    # (in order), and the cards among them not yet terminal.
    """
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        cwd TEXT NOT NULL,
        model TEXT,
        title TEXT,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        deleted INTEGER NOT NULL DEFAULT 0,
        owner TEXT
    );
    CREATE INDEX sessions_by_cwd ON sessions (cwd, updated_at);
    CREATE INDEX sessions_by_update ON sessions (updated_at, id);
    CREATE TABLE history (
        session_id TEXT NOT NULL REFERENCES sessions (id),
        seq INTEGER NOT NULL,
        entry BLOB NOT NULL,
        PRIMARY KEY (session_id, seq)
    ) WITHOUT ROWID;
    CREATE TABLE frames (
        session_id TEXT NOT NULL REFERENCES sessions (id),
        seq INTEGER NOT NULL,
        frame BLOB NOT NULL,
        PRIMARY KEY (session_id, seq)
    ) WITHOUT ROWID;
    CREATE TABLE open_cards (
        session_id TEXT NOT NULL REFERENCES sessions (id),
        call_id TEXT NOT NULL,
        tool_name TEXT NOT NULL,
        PRIMARY KEY (session_id, call_id)
    ) WITHOUT ROWID;
    """,
    # 1 -> 2: the session's mode (``messages.modes``); NULL for one stored before modes were.
    """
    ALTER TABLE sessions ADD COLUMN mode TEXT;
    """,
    # 2 -> 3: every frame carries its number in the session's log (``_meta.toolprep.seq``,
    # the ``seq`` it is stored under), so a client can resume after it; an open card
    # remembers whether its call started (its ``in_progress`` frame was written).
    """
    UPDATE frames SET frame = CAST(
        json_set(CAST(frame AS TEXT), '$._meta.toolprep', json_object('seq', seq)) AS BLOB
    );
    ALTER TABLE open_cards ADD COLUMN started INTEGER NOT NULL DEFAULT 0;
    """,
    # 3 -> 4: the session's high-water mark of frame numbers (``reserved_seq``): no number
    # above it was ever shown to a client, so a process that opens the session again numbers
    # on after it and never gives a shown number to another frame. ``reserved_exact``: it is
    # the last number shown (the session was closed), not a bound reserved ahead of it.
    """
    ALTER TABLE sessions ADD COLUMN reserved_seq INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE sessions ADD COLUMN reserved_exact INTEGER NOT NULL DEFAULT 1;
    UPDATE sessions SET reserved_seq = (
        SELECT COALESCE(MAX(seq), 0) FROM frames WHERE frames.session_id = sessions.id
    );
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)


class SchemaTooNew(Exception):
    def __init__(self, found: int) -> None:
        super().__init__(
            f"the database has schema version {found}; this toolprep knows up to "
            f"{SCHEMA_VERSION} (a newer toolprep wrote it)"
        )


def migrate(connection: sqlite3.Connection) -> int:
    """Bring the database to ``SCHEMA_VERSION``; returns the version it was at."""
    (found,) = connection.execute("PRAGMA user_version").fetchone()
    if found > SCHEMA_VERSION:
        raise SchemaTooNew(found)
    for version in range(found, SCHEMA_VERSION):
        connection.execute("BEGIN IMMEDIATE")
        try:
            # Another process opening the same new file may have taken this step while
            # this one waited for the write lock.
            (now,) = connection.execute("PRAGMA user_version").fetchone()
            if now == version:
                for statement in MIGRATIONS[version].split(";"):
                    if statement.strip():
                        connection.execute(statement)
                connection.execute(f"PRAGMA user_version = {version + 1}")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")
    return int(found)
