"""``Sessions``: the stored sessions themselves, and the history each keeps.

Per session: where it works (cwd), its model, mode and title, and the history the model
sees, saved at each turn boundary. A deleted session's content is forgotten but its id
stays taken, so it is never reused. Its frames are ``frame_log``'s; ``load`` reads them
with the rest, for a session opened again.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from toolprep.messages.codec import dump_content, load_content
from toolprep.messages.content import Content
from toolprep.runtime.kernel.session_host import SessionInfo
from toolprep.runtime.kernel.session_title import title_of
from toolprep.runtime.store.claims import refuse_if_served_elsewhere
from toolprep.runtime.store.database import StoreDatabase, require_session
from toolprep.runtime.store.errors import SessionStoreReadOnly, StoreError
from toolprep.runtime.store.list_cursor import decode_list_cursor, encode_list_cursor
from toolprep.runtime.store.recovery import ReadOnlyRecovery

__all__ = ["Sessions", "StoredSession"]


@dataclass(frozen=True, slots=True)
class StoredSession:
    info: SessionInfo
    history: tuple[Content, ...]
    frames: tuple[dict[str, Any], ...]


class Sessions:
    """Creates, reads, lists, updates and deletes sessions; ``owner`` owns those it creates."""

    def __init__(self, database: StoreDatabase, recovery: ReadOnlyRecovery, owner: str) -> None:
        self._database = database
        self._recovery = recovery
        self._owner = owner

    # --- writing --------------------------------------------------------------------------

    def create(self, session_id: str, cwd: str, model: str | None = None) -> SessionInfo:
        """Store a new session; an id used before (even by a deleted session) is refused,
        and so is any while the store cannot be written (``SessionStoreReadOnly``), which
        includes while another process holds its write lock past the busy timeout."""
        self._recovery.require_writable()
        now = time.time()
        try:
            with self._database.transaction(f"create session {session_id}") as db:
                try:
                    db.execute(
                        "INSERT INTO sessions (id, cwd, model, created_at, updated_at, owner) "
                        "VALUES (?, ?, ?, ?, ?, ?)",
                        (session_id, cwd, model, now, now, self._owner),
                    )
                except sqlite3.IntegrityError:
                    raise StoreError(f"session id {session_id} was already used") from None
        except StoreError as exc:
            if exc.locked:  # refused as the docs say (-32004), not failed
                raise SessionStoreReadOnly(exc.cause) from None
            raise
        return SessionInfo(session_id, cwd, model, None, now, now)

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
        with self._database.transaction(f"save the history of {session_id}") as db:
            info = require_session(db, session_id)
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
        with self._database.transaction(f"set the model of {session_id}") as db:
            require_session(db, session_id)
            db.execute("UPDATE sessions SET model = ? WHERE id = ?", (model, session_id))

    def set_mode(self, session_id: str, mode: str) -> None:
        """Keep the session's mode (``messages.modes``), so a loaded session keeps it."""
        with self._database.transaction(f"set the mode of {session_id}") as db:
            require_session(db, session_id)
            db.execute("UPDATE sessions SET mode = ? WHERE id = ?", (mode, session_id))

    def delete(self, session_id: str, *, unless_served: bool = False) -> None:
        """Forget the session's content; its id stays taken so it is never reused.

        Refused (``SessionOwnedElsewhere``) while another live process serves
        the session: it would go on writing to a session that is gone; with
        ``unless_served`` (a retention sweep) also while this process serves it.
        """
        with self._database.transaction(f"delete session {session_id}") as db:
            require_session(db, session_id)
            refuse_if_served_elsewhere(db, session_id, "" if unless_served else self._owner)
            for table in ("frames", "open_cards", "history"):
                db.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
            db.execute("UPDATE sessions SET deleted = 1, title = NULL WHERE id = ?", (session_id,))

    def untouched_since(
        self, cutoff: float, limit: int, after: tuple[float, str] | None = None
    ) -> list[tuple[float, str]]:
        """Up to ``limit`` kept sessions last updated before ``cutoff`` (a ``time.time()``),
        oldest first, as (updated at, id), from past ``after`` (the last one a previous
        call returned) on: what a retention sweep looks at."""
        query = "SELECT updated_at, id FROM sessions WHERE deleted = 0 AND updated_at < ?"
        params: list[Any] = [cutoff]
        if after is not None:
            query += " AND (updated_at > ? OR (updated_at = ? AND id > ?))"
            params.extend([after[0], after[0], after[1]])
        query += " ORDER BY updated_at, id LIMIT ?"
        params.append(limit)
        with self._database.transaction("find sessions past their retention", read=True) as db:
            rows = db.execute(query, params).fetchall()
        return [(float(updated_at), str(session_id)) for updated_at, session_id in rows]

    # --- reading --------------------------------------------------------------------------

    def mode_of(self, session_id: str) -> str | None:
        """The mode the session keeps; None if it never kept one (stored before modes were)."""
        with self._database.transaction(f"read the mode of {session_id}", read=True) as db:
            require_session(db, session_id)
            (mode,) = db.execute("SELECT mode FROM sessions WHERE id = ?", (session_id,)).fetchone()
        return None if mode is None else str(mode)

    def info(self, session_id: str) -> SessionInfo:
        with self._database.transaction(f"look up session {session_id}", read=True) as db:
            return require_session(db, session_id)

    def load(self, session_id: str, *, frames: bool = True) -> StoredSession:
        """The session; without ``frames`` its frame log is not read (``frames`` is empty)."""
        with self._database.transaction(f"load session {session_id}", read=True) as db:
            info = require_session(db, session_id)
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
                f"session {session_id} in {self._database.path} is damaged and cannot be "
                f"loaded: {exc}"
            ) from None
        return StoredSession(info, history, updates)

    def session_directories(self) -> set[str]:
        """The directory of every session kept (not deleted), whichever process serves it."""
        with self._database.transaction("list session directories", read=True) as db:
            rows = db.execute("SELECT DISTINCT cwd FROM sessions WHERE deleted = 0").fetchall()
        return {row[0] for row in rows if isinstance(row[0], str)}

    def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> tuple[list[SessionInfo], str | None]:
        """Sessions, most recently updated first; pass the returned cursor for the next page."""
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        after = decode_list_cursor(cursor) if cursor is not None else None
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
        # A read: another process's write lock must not hold a listing back (WAL readers
        # are never blocked by a writer).
        with self._database.transaction("list sessions", read=True) as db:
            rows = db.execute(query, params).fetchall()
        infos = [SessionInfo(*row) for row in rows[:limit]]
        more = len(rows) > limit
        return infos, (encode_list_cursor(infos[-1]) if more else None)
