"""Opening the session database: a connection set up for writing, or one that only reads.

A writing connection is in WAL mode (one writer, readers never blocked by it), at the
durability level asked for, with the schema migrated. A file that cannot be written (disk
full, read-only file, directory or file system, locked by another process past the busy
timeout) is opened to read instead, as long as it can be read; ``unwritable_cause`` tells
such a failure from one that stays an error (a corrupt file, a bug).

``synchronous`` is SQLite's ``PRAGMA synchronous`` under WAL: ``normal`` (the default)
never loses a committed transaction when the process crashes, but a power loss or OS crash
can lose the last ones; ``full`` syncs the WAL at each commit, so they survive that too, at
the cost of an fsync per write.
"""

from __future__ import annotations

import errno
import sqlite3
import time
from pathlib import Path
from typing import Literal, assert_never, get_args

from toolprep.runtime.store.errors import StoreError
from toolprep.runtime.store.private_files import create_private_file
from toolprep.runtime.store.schema import SCHEMA_VERSION, migrate

__all__ = [
    "DEFAULT_SYNCHRONOUS",
    "JOURNAL_SIZE_LIMIT",
    "SYNCHRONOUS_LEVELS",
    "Synchronous",
    "connect_read_only",
    "connect_writable",
    "empty_read_only",
    "is_lock_held_elsewhere",
    "missing",
    "probe_write",
    "unwritable_cause",
    "write_probe",
]

Synchronous = Literal["normal", "full"]
SYNCHRONOUS_LEVELS: tuple[Synchronous, ...] = get_args(Synchronous)
DEFAULT_SYNCHRONOUS: Synchronous = "normal"

JOURNAL_SIZE_LIMIT = 8 * 1024 * 1024
"""Bytes the write-ahead log is cut back to after a checkpoint."""

_SET_UP_RETRY_S = 0.02
"""Pause between two tries at setting up a connection another process holds back."""


def connect_writable(
    path: Path, busy_timeout: float, synchronous: Synchronous
) -> sqlite3.Connection:
    """A connection set up for writing (``OSError``, ``sqlite3.Error`` or ``SchemaTooNew``
    if it cannot be)."""
    create_private_file(path)  # SQLite's -wal and -shm files take its mode
    db = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
    try:
        _set_up(db, busy_timeout, synchronous)
    except BaseException:
        db.close()
        raise
    return db


def connect_read_only(path: Path, cause: str) -> sqlite3.Connection:
    """A connection that only reads, for a file that cannot be written.

    A WAL database needs its shared-memory file, which a read-only directory or a
    full disk may not let SQLite create; then the file is read as immutable (what
    its last checkpoint holds).
    """
    failures = []
    for options in ("mode=ro", "mode=ro&immutable=1"):
        try:
            db = sqlite3.connect(
                f"{path.resolve().as_uri()}?{options}",
                uri=True,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            failures.append(str(exc))
            continue
        try:
            (version,) = db.execute("PRAGMA user_version").fetchone()
            db.execute("SELECT 1 FROM sessions LIMIT 1").fetchall()
        except sqlite3.Error as exc:
            db.close()
            failures.append(str(exc))
            continue
        if version != SCHEMA_VERSION:
            db.close()
            raise StoreError(
                f"cannot use the session database {path}: it cannot be written "
                f"({cause}) and its schema (version {version}) is not this toolprep's "
                f"({SCHEMA_VERSION})"
            )
        return db
    raise StoreError(
        f"cannot open the session database {path}: it cannot be written ({cause}) "
        f"nor read ({failures[-1]})"
    )


def missing(path: Path) -> bool:
    """Whether ``path`` surely does not exist (a directory that cannot be searched says
    nothing either way, and the file is then tried, and its failure told, as any)."""
    try:
        path.stat()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


def empty_read_only() -> sqlite3.Connection:
    """A stand-in for a file that does not exist and could not be created (an empty data
    directory on a read-only or full disk): an empty store of this schema in memory, which
    refuses writes as a read-only file does (``SQLITE_READONLY``), so nothing is kept
    there that the file would lack."""
    db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    migrate(db)
    db.execute("PRAGMA query_only = ON")
    return db


def write_probe(db: sqlite3.Connection) -> str | None:
    """Why ``db`` cannot commit a write now, or None if it can.

    The write sets a header field to the value it has: a real commit (a WAL frame
    that must reach the disk) that changes nothing.
    """
    try:
        probe_write(db)
    except sqlite3.Error as exc:
        return unwritable_cause(exc) or str(exc)
    return None


def probe_write(db: sqlite3.Connection) -> None:
    """``write_probe``'s write; raises what SQLite raised if it cannot be made."""
    db.execute("BEGIN IMMEDIATE")
    try:
        (application_id,) = db.execute("PRAGMA application_id").fetchone()
        db.execute(f"PRAGMA application_id = {int(application_id)}")
        db.execute("COMMIT")
    finally:
        if db.in_transaction:
            db.execute("ROLLBACK")


def _set_up(db: sqlite3.Connection, busy_timeout: float, synchronous: Synchronous) -> None:
    """Set the connection up and migrate, retrying while another process holds the file.

    Switching to WAL and recovering a WAL another process is checkpointing or
    deleting (as it does when its last connection closes) can answer "database is
    locked" at once, without SQLite's busy handler; two agents starting on one data
    directory hit that. Every step here is idempotent, so it is retried within the
    busy timeout.
    """
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            db.execute("PRAGMA foreign_keys = ON")
            # Takes effect only in a new file (before its first table): the pages deleted
            # sessions free can then be given back (``reclaim_free_pages``).
            db.execute("PRAGMA auto_vacuum = INCREMENTAL")
            db.execute("PRAGMA journal_mode = WAL")
            db.execute(f"PRAGMA synchronous = {_synchronous_pragma(synchronous)}")
            # Readers in other processes can hold the WAL past SQLite's automatic
            # checkpoint; without a limit it then keeps its largest size for good.
            db.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
            migrate(db)
            return
        except sqlite3.OperationalError as exc:
            locked = "locked" in str(exc) or "busy" in str(exc)
            if not locked or time.monotonic() >= deadline:
                raise
            time.sleep(_SET_UP_RETRY_S)


_LOCKED = ("SQLITE_BUSY", "SQLITE_LOCKED")
"""SQLite's answers (and their extended codes) to a lock another process held past the busy
timeout."""
_UNWRITABLE_ERRNOS = frozenset(
    {errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EFBIG}
)


_PLAIN: tuple[tuple[str, str], ...] = (
    ("SQLITE_FULL", "the disk is full"),
    ("SQLITE_IOERR", "the disk failed a read or a write"),
    ("SQLITE_READONLY", "the database file cannot be written"),
    ("SQLITE_CANTOPEN", "the database file cannot be opened for writing"),
    ("SQLITE_BUSY", "database is locked"),
    ("SQLITE_LOCKED", "database is locked"),
)
"""What the store says, in its own words, for SQLite's answers that mean it cannot be
written now: this is what clients are told (``data.cause``, a turn's notice of a loss),
while the log keeps SQLite's own text. A lock keeps the words the docs have always given."""


def unwritable_cause(exc: BaseException) -> str | None:
    """Why the store cannot be written now, in the store's words, if ``exc`` means that;
    None for anything else (a corrupt file, a bug), which stays an error."""
    if isinstance(exc, sqlite3.Error):
        name = getattr(exc, "sqlite_errorname", None) or ""
        for kind, plain in _PLAIN:
            if name == kind or name.startswith(f"{kind}_"):
                return plain
        return None
    if isinstance(exc, OSError) and exc.errno in _UNWRITABLE_ERRNOS:
        return exc.strerror or str(exc)
    return None


def is_lock_held_elsewhere(exc: BaseException) -> bool:
    """Whether ``exc`` is a lock another process held past the busy timeout."""
    return isinstance(exc, sqlite3.Error) and _is_one_of(exc, _LOCKED)


def _is_one_of(exc: sqlite3.Error, kinds: tuple[str, ...]) -> bool:
    name = getattr(exc, "sqlite_errorname", None) or ""
    return any(name == kind or name.startswith(f"{kind}_") for kind in kinds)


def _synchronous_pragma(level: Synchronous) -> str:
    match level:
        case "normal":
            return "NORMAL"
        case "full":
            return "FULL"
        case _:
            assert_never(level)
