"""``StoreDatabase``: the session store's one SQLite connection, the lock it is used under,
and whether it can be written.

Every part of the store (``sessions``, ``frame_log``, ``claims``, ``open_cards``) works
through ``transaction``: one connection in WAL mode, used under one lock, so there is one
writer while readers are never blocked by it. A failure becomes a ``StoreError`` naming the
file and what was being done; one that says the store cannot be written (the disk full,
read-only or failing, another process's lock held past the busy timeout) makes the store
read-only, and ``recovery`` takes it from there.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from toolprep.runtime.kernel.session_host import SessionInfo
from toolprep.runtime.store.connection import (
    SYNCHRONOUS_LEVELS,
    Synchronous,
    connect_read_only,
    connect_writable,
    empty_read_only,
    is_lock_held_elsewhere,
    missing,
    probe_write,
    unwritable_cause,
    write_probe,
)
from toolprep.runtime.store.errors import SessionNotStored, StoreError
from toolprep.runtime.store.schema import SchemaTooNew

__all__ = ["StoreDatabase", "require_session"]

logger = logging.getLogger(__name__)


_FAILED = "the session store failed (the agent's log says how)"
"""A failure's cause as clients hear it when it is not one of ``unwritable_cause``'s: a
corrupt file, say, whose SQLite text only the log keeps."""


def _nothing() -> None:
    """What the store does when it turns read-only, until ``recovery`` says otherwise."""


class StoreDatabase:
    """The connection, its lock, and why it cannot be written (if it cannot).

    ``read_only`` and ``closed`` are read and written with ``lock`` held.
    """

    def __init__(self, path: Path, *, busy_timeout: float, synchronous: Synchronous) -> None:
        if synchronous not in SYNCHRONOUS_LEVELS:
            raise ValueError(
                f"synchronous must be one of {', '.join(SYNCHRONOUS_LEVELS)}, got {synchronous!r}"
            )
        self.path = path
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        self.lock = threading.Lock()
        self.read_only: str | None = None
        """Why the store cannot be written, or None while it can."""
        self.closed = False
        self._stands_in = False
        """Whether the connection is ``empty_read_only``'s, for a file not made yet."""
        self.on_unwritable: Callable[[], None] = _nothing
        """Called with the lock held when a write finds the store cannot be written."""
        try:
            self._connection = connect_writable(path, busy_timeout, synchronous)
        except SchemaTooNew as exc:
            raise StoreError(f"cannot use the session database {path}: {exc}") from None
        except (OSError, sqlite3.Error) as exc:
            cause = unwritable_cause(exc)
            if cause is None:
                raise StoreError(f"cannot open the session database {path}: {exc}") from None
            # No file yet, and none can be made: no session to read until one is.
            self._stands_in = missing(path)
            self._connection = (
                empty_read_only() if self._stands_in else connect_read_only(path, cause)
            )
            self.read_only = cause
        else:
            self.read_only = write_probe(self._connection)
        logger.info("opened the session store %s (synchronous %s)", path, synchronous)

    @property
    def read_only_cause(self) -> str | None:
        """Why the store cannot be written, as last found; None while it can."""
        with self.lock:
            return self.read_only

    @contextmanager
    def transaction(self, doing: str, *, read: bool = False) -> Iterator[sqlite3.Connection]:
        """One transaction under the lock; a write that cannot be made makes the store read-only.
        ``read``: a read-only one, which another process's write lock does not hold back."""
        with self.lock:
            # A read-only store reads without the write lock BEGIN IMMEDIATE takes: its
            # connection may not be able to take it, or another process may hold it.
            begin = "BEGIN" if read or self.read_only is not None else "BEGIN IMMEDIATE"
            if self._stands_in:
                self._read_the_file()
            db = self._connection
            try:
                db.execute(begin)
                try:
                    yield db
                except BaseException:
                    # SQLite may have rolled the transaction back itself (a full disk on a
                    # large write does): a ROLLBACK then fails, and its "cannot rollback - no
                    # transaction is active" must not replace the error that says why.
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")
            except sqlite3.Error as exc:
                if db.in_transaction:
                    with suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                self._note_unwritable(exc)
                locked = is_lock_held_elsewhere(exc)
                message = f"cannot {doing} in {self.path}: {exc}"
                # Clients hear the cause in the store's words, never SQLite's text.
                cause = unwritable_cause(exc) or _FAILED
                raise StoreError(message, cause=cause, locked=locked) from None

    def reopen_writable(self, busy_timeout: float) -> bool:
        """With the lock held: a writable connection in place of the current one, if the
        file can be written now (waiting at most ``busy_timeout`` for another process's
        lock); else ``read_only`` says why not."""
        try:
            db = connect_writable(self.path, busy_timeout, self.synchronous)
        except (OSError, sqlite3.Error, SchemaTooNew) as exc:
            self.read_only = unwritable_cause(exc) or str(exc)
            return False
        cause = write_probe(db)
        if cause is not None:
            db.close()
            self.read_only = cause
            return False
        self._connection.close()
        self._connection = db
        db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        self.read_only = None
        self._stands_in = False
        return True

    def unwritable_now(self) -> str | None:
        """Why the store cannot be written at this moment, or None if it can (or may: a lock
        another process holds for a moment says nothing of the disk).

        A store thought writable is tried with a write that changes nothing, which waits for
        no lock: a replay asks this of a session whose frames another process of this
        agent may have shown and not stored (its own store refusing them), and must not
        wait."""
        with self.lock:
            if self.read_only is not None or self.closed:
                return self.read_only
            db = self._connection
            try:
                db.execute("PRAGMA busy_timeout = 0")
                try:
                    probe_write(db)
                finally:
                    db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            except sqlite3.Error as exc:
                if is_lock_held_elsewhere(exc):
                    return None
                self._note_unwritable(exc)
                return self.read_only
            return None

    def reclaim_free_pages(self, pages: int) -> int:
        """Give back to the file system up to ``pages`` of the pages deleted rows left free
        (``PRAGMA incremental_vacuum``; a file created before ``auto_vacuum`` was set keeps
        them for reuse instead); how many it gave back. One short write: its time is bounded
        by ``pages``, so it never holds the store long."""
        with self.lock:
            if self.read_only is not None or self.closed:
                return 0
            db = self._connection
            try:
                (before,) = db.execute("PRAGMA freelist_count").fetchone()
                # Stepped to its end only as a script: each step frees one page.
                db.executescript(f"PRAGMA incremental_vacuum({int(pages)});")
                (after,) = db.execute("PRAGMA freelist_count").fetchone()
            except sqlite3.Error as exc:
                self._note_unwritable(exc)
                raise StoreError(f"cannot reclaim free pages in {self.path}: {exc}") from None
            return int(before) - int(after)

    @property
    def free_pages(self) -> int:
        """Pages deleted rows left free in the file (reused before the file grows)."""
        with self.transaction("count free pages", read=True) as db:
            (free,) = db.execute("PRAGMA freelist_count").fetchone()
        return int(free)

    def _read_the_file(self) -> None:
        """With the lock held, while an empty stand-in is read for a file that did not
        exist: read the file instead once another process (a worker of this daemon, a
        second agent) has made it, so what it stores is listed and loaded here too."""
        if missing(self.path):
            return
        assert self.read_only is not None
        try:
            db = connect_read_only(self.path, self.read_only)
        except StoreError:  # made but not set up yet: still nothing stored to read
            return
        self._connection.close()
        self._connection = db
        self._stands_in = False

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self._connection.close()

    def _note_unwritable(self, exc: sqlite3.Error) -> None:
        """With the lock held: a failure that says the store cannot be written (the disk
        full, read-only or failing; another process's lock held past the busy timeout) makes
        it read-only until ``recovery`` finds it writable.

        After a lock, the connection stops waiting for it: each write refused meanwhile
        fails at once instead of after another busy timeout, so a turn of many cards ends
        within one timeout rather than one per write (``reopen_writable`` gives the new
        connection its timeout back)."""
        cause = unwritable_cause(exc)
        if cause is None or self.read_only is not None:
            return
        if is_lock_held_elsewhere(exc):
            with suppress(sqlite3.Error):
                self._connection.execute("PRAGMA busy_timeout = 0")
        self.read_only = cause
        logger.error(
            "the session store %s cannot be written (%s; SQLite: %s): new sessions and turns "
            "are refused until it can be",
            self.path,
            cause,
            exc,
        )
        self.on_unwritable()


def require_session(db: sqlite3.Connection, session_id: str) -> SessionInfo:
    """In a transaction: the session, or ``SessionNotStored`` if no kept session has this id
    (what every part checks before it reads or writes a session's rows)."""
    row = db.execute(
        "SELECT id, cwd, model, title, created_at, updated_at FROM sessions "
        "WHERE id = ? AND deleted = 0",
        (session_id,),
    ).fetchone()
    if row is None:
        raise SessionNotStored(session_id)
    return SessionInfo(*row)
