"""``SessionStore``: sessions, their history and their frames in one SQLite file.

What is kept, per session: where it works (cwd), its model, mode and title, the
history the model sees (saved whole at each turn boundary) and a numbered
log of the ``session/update`` frames sent, so that loading the session can
replay exactly what the editor showed. The cards among those frames that
are not terminal yet are tracked as they are written: after a crash,
``close_open_cards`` gives each its terminal discard, so a replay never
shows a card that spins forever.

One connection in WAL mode, used under a lock: one writer, readers never
blocked by it. Every SQLite failure becomes a ``StoreError`` that names the
file and what was being done, so a corrupt, locked or full database is a
clear message and never a traceback.

A store that cannot be written (disk full, read-only file, directory or
file system, locked by another process past the busy timeout) still opens,
read-only, as long as it can be read: sessions can be listed and loaded,
while ``create`` and ``require_writable`` raise ``SessionStoreReadOnly``
naming the cause. Each of those calls first tries a cheap write again (a
header field written with its own value), so the store recovers as soon as
the disk does; it then writes the crash discards it owes (``close_open_cards``
called while it could not) and the gap marks (``resume_seq``). A write that
fails at run time because the disk filled or turned read-only puts it in the
same state.

``synchronous`` is SQLite's ``PRAGMA synchronous`` under WAL: ``normal``
(the default) never loses a committed transaction when the process crashes,
but a power loss or OS crash can lose the last ones; ``full`` syncs the WAL
at each commit, so they survive that too, at the cost of an fsync per write.
"""

from __future__ import annotations

import base64
import binascii
import errno
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, assert_never, get_args

import orjson

from toolprep.messages.codec import dump_content, load_content
from toolprep.messages.content import Content
from toolprep.messages.frames import (
    DiscardReason,
    GapCause,
    card_change,
    discarded,
    gap_mark,
    gap_of,
    numbered,
    seq_of,
)
from toolprep.runtime.session_host import (
    SessionInfo,
    SessionServedElsewhere,
    StoreReadOnly,
    UnknownSession,
)
from toolprep.runtime.session_title import title_of
from toolprep.runtime.store.ownership import describe_owner, owner_alive, this_process
from toolprep.runtime.store.private_files import create_private_file
from toolprep.runtime.store.schema import SCHEMA_VERSION, SchemaTooNew, migrate

__all__ = [
    "DEFAULT_SYNCHRONOUS",
    "SYNCHRONOUS_LEVELS",
    "SessionInfo",
    "SessionNotStored",
    "SessionOwnedElsewhere",
    "SessionStore",
    "SessionStoreReadOnly",
    "StoreError",
    "StoredSession",
    "Synchronous",
    "decode_list_cursor",
    "encode_list_cursor",
]

logger = logging.getLogger(__name__)

DEFAULT_BUSY_TIMEOUT_S = 5.0

Synchronous = Literal["normal", "full"]
SYNCHRONOUS_LEVELS: tuple[Synchronous, ...] = get_args(Synchronous)
DEFAULT_SYNCHRONOUS: Synchronous = "normal"

PROBE_BUSY_TIMEOUT_S = 0.1
"""How long a try at writing a read-only store again waits for another process's lock."""

RECOVERY_PROBE_S = 5.0
"""How often a read-only store tries on its own to write again (besides before each new
session or turn), so that it recovers, and writes what it owes, with nothing asked of it."""

JOURNAL_SIZE_LIMIT = 8 * 1024 * 1024
"""Bytes the write-ahead log is cut back to after a checkpoint."""


class StoreError(Exception):
    """The session database could not do what was asked; the message says which file and why.

    ``cause`` is what SQLite (or the OS) said, without the file and the action: failures
    of one cause are counted together (see ``failure_log``).
    """

    def __init__(self, message: str, *, cause: str | None = None) -> None:
        super().__init__(message)
        self.cause = cause if cause is not None else message


class SessionNotStored(StoreError, UnknownSession):
    """No stored session has this id (never created, or deleted)."""

    def __init__(self, session_id: str) -> None:
        UnknownSession.__init__(self, session_id)
        self.cause = str(self)


class SessionOwnedElsewhere(StoreError, SessionServedElsewhere):
    """Another live process owns the session (see ``ownership``); ``owner`` is its name."""

    def __init__(self, session_id: str, owner: str) -> None:
        SessionServedElsewhere.__init__(self, session_id, describe_owner(owner))
        self.cause = str(self)
        self.owner = owner


class SessionStoreReadOnly(StoreError, StoreReadOnly):
    """The store cannot be written now; ``cause`` says why (see the module docstring)."""

    def __init__(self, cause: str) -> None:
        StoreReadOnly.__init__(self, cause)


@dataclass(frozen=True, slots=True)
class StoredSession:
    info: SessionInfo
    history: tuple[Content, ...]
    frames: tuple[dict[str, Any], ...]


_SET_UP_RETRY_S = 0.02
"""Pause between two tries at setting up a connection another process holds back."""


class SessionStore:
    """See the module docstring. Thread-safe; close it when done."""

    def __init__(
        self,
        path: Path | str,
        *,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT_S,
        owner: str | None = None,
        synchronous: Synchronous = DEFAULT_SYNCHRONOUS,
    ) -> None:
        """``owner`` names this process in the sessions it creates or claims (default: its
        host, pid and start time; see ``ownership``)."""
        if synchronous not in SYNCHRONOUS_LEVELS:
            raise ValueError(
                f"synchronous must be one of {', '.join(SYNCHRONOUS_LEVELS)}, got {synchronous!r}"
            )
        self.path = Path(path)
        self.owner = owner or this_process()
        self.synchronous = synchronous
        self._busy_timeout = busy_timeout
        self._lock = threading.Lock()
        self._read_only: str | None = None
        """Why the store cannot be written, or None while it can."""
        self._cards_owed = False
        self._seals_owed: dict[str, tuple[int, int, bool]] = {}
        """Per session, the gap ``resume_seq`` found and could not mark: (last stored,
        reserved, exact)."""
        self._closed = False
        self._probe_timer: threading.Timer | None = None
        try:
            self._db = self._connect_writable(busy_timeout)
        except SchemaTooNew as exc:
            raise StoreError(f"cannot use the session database {self.path}: {exc}") from None
        except (OSError, sqlite3.Error) as exc:
            cause = _unwritable_cause(exc, at_open=True)
            if cause is None:
                raise StoreError(f"cannot open the session database {self.path}: {exc}") from None
            self._db = self._connect_read_only(cause)
            self._read_only = cause
        else:
            self._read_only = self._write_probe(self._db)
        logger.info("opened the session store %s (synchronous %s)", self.path, synchronous)
        if self._read_only is not None:
            logger.error(
                "the session store %s cannot be written (%s): sessions can be listed and "
                "loaded; new sessions and turns are refused until it can be",
                self.path,
                self._read_only,
            )
            with self._lock:
                self._arm_probe()

    @property
    def read_only_cause(self) -> str | None:
        """Why the store cannot be written, as last found; None while it can."""
        with self._lock:
            return self._read_only

    def require_writable(self) -> None:
        """Return if the store can be written; else try again, and raise
        ``SessionStoreReadOnly`` naming the cause if it still cannot.

        Called before a session or a turn starts, so nothing begins that could not be kept.
        Once it can be written again the crash discards owed since are written.
        """
        with self._lock:
            if self._read_only is None:
                return
            if self._closed:
                raise SessionStoreReadOnly(f"{self._read_only} (and the store is closed)")
            recovered = self._recover()
            cause = self._read_only
            owed = recovered and self._cards_owed
            if recovered:
                self._cards_owed = False
        if not recovered:
            assert cause is not None
            raise SessionStoreReadOnly(cause)
        logger.warning(
            "the session store %s can be written again: new sessions and turns are accepted",
            self.path,
        )
        self._write_owed_seals()
        if owed:
            self.close_open_cards()

    def _arm_probe(self) -> None:
        """With the lock held: try to write again in ``RECOVERY_PROBE_S`` (unless closed)."""
        if self._closed or self._probe_timer is not None:
            return
        timer = threading.Timer(RECOVERY_PROBE_S, self._probe_again)
        timer.name, timer.daemon = "toolprep-store-probe", True
        self._probe_timer = timer
        timer.start()

    def _probe_again(self) -> None:
        with self._lock:
            self._probe_timer = None
            if self._closed:
                return
        try:
            self.require_writable()
        except SessionStoreReadOnly:
            with self._lock:
                self._arm_probe()
        except StoreError as exc:  # the owed discards: the next turn's close writes them
            logger.error("after the session store could be written again: %s", exc)

    def _recover(self) -> bool:
        """With the lock held: a writable connection in place of the current one, if the
        file can be written now."""
        try:
            db = self._connect_writable(PROBE_BUSY_TIMEOUT_S)
        except (OSError, sqlite3.Error, SchemaTooNew) as exc:
            self._read_only = _unwritable_cause(exc, at_open=True) or str(exc)
            return False
        cause = self._write_probe(db)
        if cause is not None:
            db.close()
            self._read_only = cause
            return False
        self._db.close()
        self._db = db
        db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
        self._read_only = None
        return True

    def _connect_writable(self, busy_timeout: float) -> sqlite3.Connection:
        """A connection set up for writing (``OSError``, ``sqlite3.Error`` or ``SchemaTooNew``
        if it cannot be)."""
        create_private_file(self.path)  # SQLite's -wal and -shm files take its mode
        db = sqlite3.connect(
            self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
        )
        try:
            self._set_up(db, busy_timeout)
        except BaseException:
            db.close()
            raise
        return db

    def _connect_read_only(self, cause: str) -> sqlite3.Connection:
        """A connection that only reads, for a file that cannot be written.

        A WAL database needs its shared-memory file, which a read-only directory or a
        full disk may not let SQLite create; then the file is read as immutable (what
        its last checkpoint holds).
        """
        failures = []
        for options in ("mode=ro", "mode=ro&immutable=1"):
            try:
                db = sqlite3.connect(
                    f"{self.path.resolve().as_uri()}?{options}",
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
                    f"cannot use the session database {self.path}: it cannot be written "
                    f"({cause}) and its schema (version {version}) is not this toolprep's "
                    f"({SCHEMA_VERSION})"
                )
            return db
        raise StoreError(
            f"cannot open the session database {self.path}: it cannot be written ({cause}) "
            f"nor read ({failures[-1]})"
        )

    def _write_probe(self, db: sqlite3.Connection) -> str | None:
        """Why ``db`` cannot commit a write now, or None if it can.

        The write sets a header field to the value it has: a real commit (a WAL frame
        that must reach the disk) that changes nothing.
        """
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                (application_id,) = db.execute("PRAGMA application_id").fetchone()
                db.execute(f"PRAGMA application_id = {int(application_id)}")
                db.execute("COMMIT")
            finally:
                if db.in_transaction:
                    db.execute("ROLLBACK")
        except sqlite3.Error as exc:
            return str(exc)
        return None

    def _set_up(self, db: sqlite3.Connection, busy_timeout: float) -> None:
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
                db.execute("PRAGMA journal_mode = WAL")
                db.execute(f"PRAGMA synchronous = {_synchronous_pragma(self.synchronous)}")
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

    def close(self) -> None:
        with self._lock:
            self._closed = True
            timer, self._probe_timer = self._probe_timer, None
            self._db.close()
        if timer is not None:
            timer.cancel()

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writing --------------------------------------------------------------------------

    def create(self, session_id: str, cwd: str, model: str | None = None) -> SessionInfo:
        """Store a new session; an id used before (even by a deleted session) is refused,
        and so is any while the store cannot be written (``SessionStoreReadOnly``)."""
        self.require_writable()
        now = time.time()
        with self._transaction(f"create session {session_id}") as db:
            try:
                db.execute(
                    "INSERT INTO sessions (id, cwd, model, created_at, updated_at, owner) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (session_id, cwd, model, now, now, self.owner),
                )
            except sqlite3.IntegrityError:
                raise StoreError(f"session id {session_id} was already used") from None
        return SessionInfo(session_id, cwd, model, None, now, now)

    def append_frames(self, session_id: str, frames: Sequence[dict[str, Any]]) -> int:
        """Add ``frames`` to the session's log, in order; returns the last one's number.

        A frame ``numbered`` already (the journal numbers each as it is sent) is
        stored under its number; one without (a crash's discard, written by a
        process that does not number the session) is given the next number after
        every number a process reserved for it, after a gap mark for the reserved
        numbers the log lacks (``_seal_abandoned``). A number the log holds already
        is refused, never overwritten. The session's high-water mark
        (``reserved_seq``) is raised to the last number, in the same transaction.
        """
        if not frames:
            return self.last_seq(session_id)
        with self._transaction(f"record frames of {session_id}") as db:
            self._require(db, session_id)
            if all(seq_of(frame) is not None for frame in frames):
                last = _stored_seq(db, session_id)
            else:
                last = self._seal_abandoned(db, session_id)
            rows = []
            for frame in frames:
                seq = seq_of(frame)
                if seq is None:
                    seq = last + 1
                    frame = numbered(frame, seq)
                last = max(last, seq)
                rows.append((session_id, seq, orjson.dumps(frame)))
            try:
                db.executemany("INSERT INTO frames (session_id, seq, frame) VALUES (?, ?, ?)", rows)
            except sqlite3.IntegrityError:
                raise StoreError(
                    f"cannot record frames of {session_id} in {self.path}: their numbers "
                    f"({rows[0][1]} to {rows[-1][1]}) are taken"
                ) from None
            for frame in frames:
                card = card_change(frame)
                if card is None:
                    continue
                call_id, tool_name, terminal = card
                if terminal:
                    db.execute(
                        "DELETE FROM open_cards WHERE session_id = ? AND call_id = ?",
                        (session_id, call_id),
                    )
                else:
                    started = int(frame.get("status") == "in_progress")
                    db.execute(
                        "INSERT INTO open_cards (session_id, call_id, tool_name, started) "
                        "VALUES (?, ?, ?, ?) ON CONFLICT (session_id, call_id) "
                        "DO UPDATE SET started = MAX(started, excluded.started)",
                        (session_id, call_id, tool_name, started),
                    )
            db.execute(
                "UPDATE sessions SET updated_at = ?, reserved_seq = MAX(reserved_seq, ?) "
                "WHERE id = ?",
                (time.time(), last, session_id),
            )
        return int(last)

    def reserve_seq(self, session_id: str, through: int) -> None:
        """Raise the session's high-water mark to ``through`` before frames up to it are
        shown: a process that opens the session later numbers on after it, never reusing
        a number a client may hold (see ``resume_seq``)."""
        with self._transaction(f"reserve frame numbers of {session_id}") as db:
            db.execute(
                "UPDATE sessions SET reserved_seq = ?, reserved_exact = 0 "
                "WHERE id = ? AND reserved_seq < ?",
                (through, session_id, through),
            )

    def settle_seq(self, session_id: str, last: int) -> None:
        """The session is closed and ``last`` was the last number it showed: the mark is
        exact from now on, so a later replay marks only numbers shown and not stored."""
        with self._transaction(f"settle the frame numbers of {session_id}") as db:
            db.execute(
                "UPDATE sessions SET reserved_seq = MAX(?, (SELECT COALESCE(MAX(seq), 0) "
                "FROM frames WHERE session_id = ?)), reserved_exact = 1 WHERE id = ?",
                (last, session_id, session_id),
            )

    def resume_seq(self, session_id: str) -> int:
        """The number of the session's last frame for a process that opens it again: its
        next frame is the one after.

        Numbers reserved and not stored (shown by a process that stopped before storing
        them, or refused by the store) get a gap mark in the log first, numbered after
        them; a store that cannot be written just numbers on past them, and a replay marks
        them at its end instead (``encoded_frames``).
        """
        if self.read_only_cause is not None:
            with self._transaction(f"read the frame log of {session_id}", read=True) as db:
                self._require(db, session_id)
                stored = _stored_seq(db, session_id)
                reserved, exact = _reserved(db, session_id)
            if reserved <= stored:
                return stored
            # The number after them is kept for the mark, written once the store recovers.
            with self._lock:
                self._seals_owed[session_id] = (stored, reserved, exact)
            return reserved + 1
        with self._transaction(f"number the frames of {session_id} on") as db:
            self._require(db, session_id)
            return self._seal_abandoned(db, session_id)

    def _write_seal(
        self, db: sqlite3.Connection, session_id: str, stored: int, reserved: int, exact: bool
    ) -> None:
        """In a write transaction: the gap mark for numbers ``stored + 1`` to ``reserved``,
        numbered ``reserved + 1``; the mark stays exact unless numbers past it are reserved."""
        cause: GapCause = "refused" if exact else "stopped"
        mark = numbered(gap_mark(reserved - stored, stored, cause), reserved + 1)
        db.execute(
            "INSERT OR IGNORE INTO frames (session_id, seq, frame) VALUES (?, ?, ?)",
            (session_id, reserved + 1, orjson.dumps(mark)),
        )
        db.execute(
            "UPDATE sessions SET reserved_seq = ?, reserved_exact = 1 "
            "WHERE id = ? AND reserved_seq <= ?",
            (reserved + 1, session_id, reserved + 1),
        )

    def _write_owed_seals(self) -> None:
        """The gap marks ``resume_seq`` owes since it found the store read-only."""
        with self._lock:
            owed, self._seals_owed = self._seals_owed, {}
        for session_id, (stored, reserved, exact) in owed.items():
            with self._transaction(f"mark the frames of {session_id} never stored") as db:
                self._write_seal(db, session_id, stored, reserved, exact)

    def _seal_abandoned(self, db: sqlite3.Connection, session_id: str) -> int:
        """In a write transaction: store a gap mark for the numbers reserved past the last
        stored frame, numbered after them; returns the number the log now ends at."""
        stored = _stored_seq(db, session_id)
        reserved, exact = _reserved(db, session_id)
        if reserved <= stored:
            return stored
        self._write_seal(db, session_id, stored, reserved, exact)
        logger.warning(
            "session %s: frames %d to %d were numbered and never stored (%s)",
            session_id,
            stored + 1,
            reserved,
            "the store refused them" if exact else "the agent stopped first",
        )
        return reserved + 1

    def last_seq(self, session_id: str) -> int:
        """The number of the session's last stored frame; 0 if it has none."""
        with self._transaction(f"read the frame log of {session_id}", read=True) as db:
            self._require(db, session_id)
            return _stored_seq(db, session_id)

    def save_history(
        self, session_id: str, history: Sequence[Content], *, rewritten: bool = False
    ) -> None:
        """Bring the stored history up to ``history`` (at a turn boundary).

        A turn only appends to the history or cuts it back to where the turn
        began, never changing what an earlier turn left: so only the entries
        past what is stored are written, and a long session costs no more per
        turn than a short one. The exception is a turn that compacted the
        history (``rewritten``): its start was replaced by a summary, so the
        whole of it is written again. The first user text titles the session.
        """
        with self._transaction(f"save the history of {session_id}") as db:
            info = self._require(db, session_id)
            (stored,) = db.execute(
                "SELECT COUNT(*) FROM history WHERE session_id = ?", (session_id,)
            ).fetchone()
            keep = 0 if rewritten else min(stored, len(history))
            db.execute("DELETE FROM history WHERE session_id = ? AND seq >= ?", (session_id, keep))
            db.executemany(
                "INSERT INTO history (session_id, seq, entry) VALUES (?, ?, ?)",
                [
                    (session_id, seq, orjson.dumps(dump_content(c)))
                    for seq, c in enumerate(history[keep:], keep)
                ],
            )
            title = info.title if info.title is not None else title_of(history)
            db.execute(
                "UPDATE sessions SET title = ?, updated_at = ? WHERE id = ?",
                (title, time.time(), session_id),
            )

    def set_model(self, session_id: str, model: str) -> None:
        """Keep the model the session's turns start with, so a loaded session keeps it."""
        with self._transaction(f"set the model of {session_id}") as db:
            self._require(db, session_id)
            db.execute("UPDATE sessions SET model = ? WHERE id = ?", (model, session_id))

    def set_mode(self, session_id: str, mode: str) -> None:
        """Keep the session's mode (``messages.modes``), so a loaded session keeps it."""
        with self._transaction(f"set the mode of {session_id}") as db:
            self._require(db, session_id)
            db.execute("UPDATE sessions SET mode = ? WHERE id = ?", (mode, session_id))

    def mode_of(self, session_id: str) -> str | None:
        """The mode the session keeps; None if it never kept one (stored before modes were)."""
        with self._transaction(f"read the mode of {session_id}") as db:
            self._require(db, session_id)
            (mode,) = db.execute("SELECT mode FROM sessions WHERE id = ?", (session_id,)).fetchone()
        return None if mode is None else str(mode)

    def delete(self, session_id: str) -> None:
        """Forget the session's content; its id stays taken so it is never reused.

        Refused (``SessionOwnedElsewhere``) while another live process serves
        the session: it would go on writing to a session that is gone.
        """
        with self._transaction(f"delete session {session_id}") as db:
            self._require(db, session_id)
            self._refuse_if_served_elsewhere(db, session_id)
            for table in ("frames", "open_cards", "history"):
                db.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
            db.execute("UPDATE sessions SET deleted = 1, title = NULL WHERE id = ?", (session_id,))

    def claim(self, session_id: str) -> None:
        """Make this process the session's owner, unless a live process serves it.

        Called before a stored session is opened again; raises
        ``SessionOwnedElsewhere`` naming the owner if it still runs. A read-only
        store only checks: the session can be loaded but not claimed.
        """
        if self.read_only_cause is not None:
            with self._transaction(f"check the owner of session {session_id}") as db:
                self._require(db, session_id)
                self._refuse_if_served_elsewhere(db, session_id)
            return
        with self._transaction(f"claim session {session_id}") as db:
            self._require(db, session_id)
            self._refuse_if_served_elsewhere(db, session_id)
            db.execute("UPDATE sessions SET owner = ? WHERE id = ?", (self.owner, session_id))

    def release(self, session_id: str) -> None:
        """This process no longer serves the session: another may open it."""
        if self.read_only_cause is not None:
            return  # it could not claim it either
        with self._transaction(f"release session {session_id}") as db:
            db.execute(
                "UPDATE sessions SET owner = NULL WHERE id = ? AND owner = ?",
                (session_id, self.owner),
            )

    def close_open_cards(self, session_id: str | None = None) -> int:
        """Append a terminal discard for every card a process that died left open.

        ``interrupted`` for a card whose ``in_progress`` frame was stored (its call
        may have run), ``crash`` for one whose call had not started.

        For every session (at start-up) or for one about to be opened again;
        sessions served by a live process, this one included, are left alone.
        Returns how many cards it closed. A read-only store closes none: for every
        session, it owes them and writes them once it can be written again.
        """
        with self._lock:
            if self._read_only is not None:
                self._cards_owed = self._cards_owed or session_id is None
                logger.warning(
                    "the cards a crash left open are not closed: the session store cannot be "
                    "written (%s)",
                    self._read_only,
                )
                return 0
        query = (
            "SELECT open_cards.session_id, call_id, tool_name, started, owner FROM open_cards "
            "JOIN sessions ON sessions.id = open_cards.session_id"
        )
        params: tuple[str, ...] = ()
        if session_id is not None:
            query += " WHERE open_cards.session_id = ?"
            params = (session_id,)
        with self._transaction("close the cards left open") as db:
            rows = db.execute(query + " ORDER BY open_cards.session_id", params).fetchall()
        served: dict[str | None, bool] = {}
        open_cards = []
        for sid, call_id, tool_name, started, owner in rows:
            if owner not in served:
                # A session this process just claimed to open again is not served yet.
                claimed = session_id is not None and owner == self.owner
                served[owner] = not claimed and owner_alive(owner)
            if not served[owner]:
                open_cards.append((sid, call_id, tool_name, bool(started)))
        by_session: dict[str, list[dict[str, Any]]] = {}
        for session_id, call_id, tool_name, started in open_cards:
            # A call whose start was written may have run (its start is written before
            # a tool with effects runs); one whose start was not had not.
            reason: DiscardReason = "interrupted" if started else "crash"
            by_session.setdefault(session_id, []).append(discarded(call_id, tool_name, reason))
        for session_id, frames in by_session.items():
            self.append_frames(session_id, frames)
        return len(open_cards)

    # --- reading --------------------------------------------------------------------------

    def info(self, session_id: str) -> SessionInfo:
        with self._transaction(f"look up session {session_id}") as db:
            return self._require(db, session_id)

    def load(self, session_id: str, *, frames: bool = True) -> StoredSession:
        """The session; without ``frames`` its frame log is not read (``frames`` is empty)."""
        with self._transaction(f"load session {session_id}") as db:
            info = self._require(db, session_id)
            entries = db.execute(
                "SELECT entry FROM history WHERE session_id = ? ORDER BY seq", (session_id,)
            ).fetchall()
            rows = (
                db.execute(
                    "SELECT frame FROM frames WHERE session_id = ? ORDER BY seq", (session_id,)
                ).fetchall()
                if frames
                else []
            )
        try:
            history = tuple(load_content(orjson.loads(entry)) for (entry,) in entries)
            updates = tuple(orjson.loads(frame) for (frame,) in rows)
        except (ValueError, KeyError, TypeError) as exc:  # CodecError is a ValueError
            raise StoreError(
                f"session {session_id} in {self.path} is damaged and cannot be loaded: {exc}"
            ) from None
        return StoredSession(info, history, updates)

    def shown_call_ids(self, session_id: str) -> frozenset[str]:
        """The ``toolCallId`` of every card the session's stored frames opened: a process that
        opens the session again must not give a new card one of them."""
        with self._transaction(f"load the tool calls of {session_id}") as db:
            self._require(db, session_id)
            # A damaged row is no card (its replay says so); it must not stop the session.
            rows = db.execute(
                "SELECT json_extract(f, '$.toolCallId') FROM ("
                " SELECT CASE WHEN json_valid(CAST(frame AS TEXT)) THEN CAST(frame AS TEXT) END"
                " AS f FROM frames WHERE session_id = ?"
                ") WHERE json_extract(f, '$.sessionUpdate') = 'tool_call'",
                (session_id,),
            ).fetchall()
        return frozenset(call_id for (call_id,) in rows if isinstance(call_id, str))

    def encoded_frames(self, session_id: str, after_seq: int = 0) -> tuple[bytes, ...]:
        """The frame log after frame ``after_seq``, as stored (compact JSON), for a replay that
        relays bytes as they are; where numbers are missing, a ``gap_mark`` says so.

        Decoding and encoding again cost a long session's replay a third of its
        time; the store wrote these bytes itself, and each is checked to be one
        JSON object so a damaged row cannot break the client's stream.
        """
        with self._transaction(f"load the frames of {session_id}") as db:
            self._require(db, session_id)
            rows = db.execute(
                "SELECT seq, frame FROM frames WHERE session_id = ? AND seq > ? ORDER BY seq",
                (session_id, after_seq),
            ).fetchall()
            reserved, exact = _reserved(db, session_id)
            (owner,) = db.execute(
                "SELECT owner FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
        frames: list[bytes] = []
        expected = after_seq + 1
        for seq, stored in rows:
            frame = bytes(stored)
            if not (frame.startswith(b"{") and frame.endswith(b"}")):
                raise StoreError(
                    f"session {session_id} in {self.path} is damaged and cannot be loaded: "
                    "a stored frame is not a JSON object"
                )
            if seq > expected and not _marks(frame, expected - 1, seq - 1):
                frames.append(orjson.dumps(gap_mark(seq - expected, expected - 1)))
            frames.append(frame)
            expected = seq + 1
        # Numbers reserved past the last stored frame by a process that no longer serves the
        # session (one that does still numbers on, and stores, what it shows).
        if reserved >= expected and not (owner is not None and owner_alive(owner)):
            cause: GapCause = "refused" if exact else "stopped"
            frames.append(orjson.dumps(gap_mark(reserved - expected + 1, expected - 1, cause)))
        return tuple(frames)

    def session_directories(self) -> set[str]:
        """The directory of every session kept (not deleted), whichever process serves it."""
        with self._transaction("list session directories", read=True) as db:
            rows = db.execute("SELECT DISTINCT cwd FROM sessions WHERE deleted = 0").fetchall()
        return {row[0] for row in rows if isinstance(row[0], str)}

    def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> tuple[list[SessionInfo], str | None]:
        """Sessions, most recently updated first; pass the returned cursor for the next page."""
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        after = _decode_cursor(cursor) if cursor is not None else None
        query = (
            "SELECT id, cwd, model, title, created_at, updated_at FROM sessions WHERE deleted = 0"
        )
        params: list[Any] = []
        if cwd is not None:
            query += " AND cwd = ?"
            params.append(cwd)
        if after is not None:
            query += " AND (updated_at < ? OR (updated_at = ? AND id > ?))"
            params.extend([after[0], after[0], after[1]])
        query += " ORDER BY updated_at DESC, id LIMIT ?"
        params.append(limit + 1)
        with self._transaction("list sessions") as db:
            rows = db.execute(query, params).fetchall()
        infos = [SessionInfo(*row) for row in rows[:limit]]
        more = len(rows) > limit
        return infos, (_encode_cursor(infos[-1]) if more else None)

    # --- plumbing ---------------------------------------------------------------------------

    @contextmanager
    def _transaction(self, doing: str, *, read: bool = False) -> Iterator[sqlite3.Connection]:
        """One transaction under the lock; a write the disk refuses makes the store read-only.
        ``read``: a read-only one, which another process's write lock does not hold back."""
        with self._lock:
            # A read-only store reads without the write lock BEGIN IMMEDIATE takes: its
            # connection may not be able to take it, or another process may hold it.
            begin = "BEGIN" if read or self._read_only is not None else "BEGIN IMMEDIATE"
            try:
                self._db.execute(begin)
                try:
                    yield self._db
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                if self._db.in_transaction:
                    with suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                self._note_unwritable(exc)
                raise StoreError(f"cannot {doing} in {self.path}: {exc}", cause=str(exc)) from None

    def _note_unwritable(self, exc: sqlite3.Error) -> None:
        """With the lock held: a failure that says the disk refuses writes (full, read-only,
        failing) makes the store read-only until ``require_writable`` finds it writable."""
        cause = _unwritable_cause(exc, at_open=False)
        if cause is None or self._read_only is not None:
            return
        self._read_only = cause
        logger.error(
            "the session store %s cannot be written (%s): new sessions and turns are refused "
            "until it can be",
            self.path,
            cause,
        )
        self._arm_probe()

    def _refuse_if_served_elsewhere(self, db: sqlite3.Connection, session_id: str) -> None:
        (owner,) = db.execute("SELECT owner FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if owner is not None and owner != self.owner and owner_alive(owner):
            raise SessionOwnedElsewhere(session_id, owner)

    @staticmethod
    def _require(db: sqlite3.Connection, session_id: str) -> SessionInfo:
        row = db.execute(
            "SELECT id, cwd, model, title, created_at, updated_at FROM sessions "
            "WHERE id = ? AND deleted = 0",
            (session_id,),
        ).fetchone()
        if row is None:
            raise SessionNotStored(session_id)
        return SessionInfo(*row)


def _stored_seq(db: sqlite3.Connection, session_id: str) -> int:
    (last,) = db.execute(
        "SELECT COALESCE(MAX(seq), 0) FROM frames WHERE session_id = ?", (session_id,)
    ).fetchone()
    return int(last)


def _reserved(db: sqlite3.Connection, session_id: str) -> tuple[int, bool]:
    """The session's high-water mark, and whether it is exact (see ``schema``)."""
    reserved, exact = db.execute(
        "SELECT reserved_seq, reserved_exact FROM sessions WHERE id = ?", (session_id,)
    ).fetchone()
    return int(reserved), bool(exact)


def _marks(frame: bytes, after_seq: int, through: int) -> bool:
    """Whether the stored ``frame`` is a gap mark for every number from ``after_seq + 1``
    to ``through`` (a replay needs no mark of its own there)."""
    if _GAP_HEAD not in frame:
        return False
    gap = gap_of(orjson.loads(frame))
    return gap is not None and gap[0] <= after_seq and gap[0] + gap[1] >= through


_GAP_HEAD = b'"gap":{'

_UNWRITABLE = ("SQLITE_READONLY", "SQLITE_FULL", "SQLITE_IOERR", "SQLITE_CANTOPEN")
"""SQLite's answers (and their extended codes) when the disk refuses a write."""
_UNWRITABLE_AT_OPEN = (*_UNWRITABLE, "SQLITE_BUSY", "SQLITE_LOCKED")
"""At open, also a lock another process held past the busy timeout."""
_UNWRITABLE_ERRNOS = frozenset(
    {errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EFBIG}
)


def _unwritable_cause(exc: BaseException, *, at_open: bool) -> str | None:
    """What ``exc`` says if it means the store cannot be written now; None for anything
    else (a corrupt file, a bug), which stays an error."""
    if isinstance(exc, sqlite3.Error):
        name = getattr(exc, "sqlite_errorname", None) or ""
        kinds = _UNWRITABLE_AT_OPEN if at_open else _UNWRITABLE
        return str(exc) if any(name == k or name.startswith(f"{k}_") for k in kinds) else None
    if isinstance(exc, OSError) and exc.errno in _UNWRITABLE_ERRNOS:
        return exc.strerror or str(exc)
    return None


def _synchronous_pragma(level: Synchronous) -> str:
    match level:
        case "normal":
            return "NORMAL"
        case "full":
            return "FULL"
        case _:
            assert_never(level)


def encode_list_cursor(info: SessionInfo) -> str:
    """The ``nextCursor`` of a session list page whose last entry is ``info``."""
    return _encode_cursor(info)


def decode_list_cursor(cursor: str) -> tuple[float, str]:
    """The (updated_at, session id) a list cursor points after; ``ValueError`` if it is none."""
    return _decode_cursor(cursor)


def _encode_cursor(info: SessionInfo) -> str:
    return base64.urlsafe_b64encode(orjson.dumps([info.updated_at, info.session_id])).decode()


def _decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        updated_at, session_id = orjson.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (binascii.Error, ValueError, TypeError):
        raise ValueError(f"not a session list cursor: {cursor!r}") from None
    if not isinstance(updated_at, (int, float)) or not isinstance(session_id, str):
        raise ValueError(f"not a session list cursor: {cursor!r}")
    return float(updated_at), session_id
