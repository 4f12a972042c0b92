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
"""

from __future__ import annotations

import base64
import binascii
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from toolprep.messages.content import Content
from toolprep.messages.frames import (
    DiscardReason,
    card_change,
    discarded,
    gap_mark,
    numbered,
    seq_of,
)
from toolprep.runtime.session_host import SessionInfo, SessionServedElsewhere, UnknownSession
from toolprep.runtime.session_title import title_of
from toolprep.runtime.store.ownership import describe_owner, owner_alive, this_process
from toolprep.runtime.store.schema import SchemaTooNew, migrate
from toolprep.runtime.workers.codec import dump_parts, load_parts
from toolprep.runtime.workers.wire import WireError

__all__ = [
    "SessionInfo",
    "SessionNotStored",
    "SessionOwnedElsewhere",
    "SessionStore",
    "StoreError",
    "StoredSession",
]

DEFAULT_BUSY_TIMEOUT_S = 5.0

JOURNAL_SIZE_LIMIT = 8 * 1024 * 1024
"""Bytes the write-ahead log is cut back to after a checkpoint."""


class StoreError(Exception):
    """The session database could not do what was asked; the message says which file and why."""


class SessionNotStored(StoreError, UnknownSession):
    """No stored session has this id (never created, or deleted)."""

    def __init__(self, session_id: str) -> None:
        UnknownSession.__init__(self, session_id)


class SessionOwnedElsewhere(StoreError, SessionServedElsewhere):
    """Another live process owns the session (see ``ownership``); ``owner`` is its name."""

    def __init__(self, session_id: str, owner: str) -> None:
        SessionServedElsewhere.__init__(self, session_id, describe_owner(owner))
        self.owner = owner


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
    ) -> None:
        """``owner`` names this process in the sessions it creates or claims (default: its
        host, pid and start time; see ``ownership``)."""
        self.path = Path(path)
        self.owner = owner or this_process()
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the session database {self.path}: {exc}") from None
        try:
            self._set_up(busy_timeout)
        except SchemaTooNew as exc:
            self._db.close()
            raise StoreError(f"cannot use the session database {self.path}: {exc}") from None
        except sqlite3.Error as exc:
            self._db.close()
            raise StoreError(f"cannot open the session database {self.path}: {exc}") from None

    def _set_up(self, busy_timeout: float) -> None:
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
                self._db.execute("PRAGMA foreign_keys = ON")
                self._db.execute("PRAGMA journal_mode = WAL")
                self._db.execute("PRAGMA synchronous = NORMAL")
                # Readers in other processes can hold the WAL past SQLite's automatic
                # checkpoint; without a limit it then keeps its largest size for good.
                self._db.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
                migrate(self._db)
                return
            except sqlite3.OperationalError as exc:
                locked = "locked" in str(exc) or "busy" in str(exc)
                if not locked or time.monotonic() >= deadline:
                    raise
                time.sleep(_SET_UP_RETRY_S)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writing --------------------------------------------------------------------------

    def create(self, session_id: str, cwd: str, model: str | None = None) -> SessionInfo:
        """Store a new session; an id used before (even by a deleted session) is refused."""
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
        stored under its number; one without is given the next after what the log
        holds. A number the log holds already is refused, never overwritten.
        """
        if not frames:
            return self.last_seq(session_id)
        with self._transaction(f"record frames of {session_id}") as db:
            self._require(db, session_id)
            (last,) = db.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM frames WHERE session_id = ?", (session_id,)
            ).fetchone()
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
            db.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (time.time(), session_id))
        return int(last)

    def last_seq(self, session_id: str) -> int:
        """The number of the session's last stored frame; 0 if it has none."""
        with self._transaction(f"read the frame log of {session_id}", read=True) as db:
            self._require(db, session_id)
            (last,) = db.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM frames WHERE session_id = ?", (session_id,)
            ).fetchone()
        return int(last)

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
                    (session_id, seq, orjson.dumps({"role": c.role, "parts": dump_parts(c.parts)}))
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
        ``SessionOwnedElsewhere`` naming the owner if it still runs.
        """
        with self._transaction(f"claim session {session_id}") as db:
            self._require(db, session_id)
            self._refuse_if_served_elsewhere(db, session_id)
            db.execute("UPDATE sessions SET owner = ? WHERE id = ?", (self.owner, session_id))

    def release(self, session_id: str) -> None:
        """This process no longer serves the session: another may open it."""
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
        Returns how many cards it closed.
        """
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
            history = tuple(_load_entry(orjson.loads(entry)) for (entry,) in entries)
            updates = tuple(orjson.loads(frame) for (frame,) in rows)
        except (ValueError, WireError, KeyError, TypeError) as exc:
            raise StoreError(
                f"session {session_id} in {self.path} is damaged and cannot be loaded: {exc}"
            ) from None
        return StoredSession(info, history, updates)

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
        frames: list[bytes] = []
        expected = after_seq + 1
        for seq, stored in rows:
            frame = bytes(stored)
            if not (frame.startswith(b"{") and frame.endswith(b"}")):
                raise StoreError(
                    f"session {session_id} in {self.path} is damaged and cannot be loaded: "
                    "a stored frame is not a JSON object"
                )
            if seq > expected:
                frames.append(orjson.dumps(gap_mark(seq - expected, expected - 1)))
            frames.append(frame)
            expected = seq + 1
        return tuple(frames)

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
        """``read``: a read-only one, which another process's write lock does not hold back."""
        with self._lock:
            try:
                self._db.execute("BEGIN" if read else "BEGIN IMMEDIATE")
                try:
                    yield self._db
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                raise StoreError(f"cannot {doing} in {self.path}: {exc}") from None

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


def _load_entry(raw: Any) -> Content:
    role = raw["role"]
    if role not in ("user", "model"):
        raise ValueError(f"unknown role {role!r}")
    return Content(role, tuple(load_parts(raw["parts"])))


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
