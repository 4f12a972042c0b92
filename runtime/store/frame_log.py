"""``FrameLog``: the numbered ``session/update`` frames each session sent, kept so that
loading the session replays exactly what the editor showed.

Every frame carries its number in the session's log (``_meta.toolprep.seq``) and is stored
under it. A number once shown is never given to another frame: the session's high-water
mark (``reserved_seq``) is raised before numbers are shown, and a process that opens the
session again numbers on after it, marking the numbers the log lacks as a gap. The cards
among the frames that are not terminal yet are tracked as they are written (``open_cards``
closes those a crash left).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Sequence
from typing import Any, Final

import orjson

from toolprep.messages.frames import (
    GapCause,
    card_change,
    gap_mark,
    gap_of,
    numbered,
    seq_of,
)
from toolprep.runtime.store.database import StoreDatabase, require_session
from toolprep.runtime.store.errors import StoreError
from toolprep.runtime.store.ownership import owner_alive
from toolprep.runtime.store.recovery import ReadOnlyRecovery

__all__ = ["FrameLog"]

logger = logging.getLogger(__name__)


class FrameLog:
    """Appends, numbers and reads back the sessions' frames."""

    def __init__(self, database: StoreDatabase, recovery: ReadOnlyRecovery) -> None:
        self._database = database
        self._recovery = recovery

    # --- writing --------------------------------------------------------------------------

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
        with self._database.transaction(f"record frames of {session_id}") as db:
            require_session(db, session_id)
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
                    f"cannot record frames of {session_id} in {self._database.path}: their "
                    f"numbers ({rows[0][1]} to {rows[-1][1]}) are taken"
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
        with self._database.transaction(f"reserve frame numbers of {session_id}") as db:
            db.execute(
                "UPDATE sessions SET reserved_seq = ?, reserved_exact = 0 "
                "WHERE id = ? AND reserved_seq < ?",
                (through, session_id, through),
            )

    def settle_seq(self, session_id: str, last: int) -> None:
        """The session is closed and ``last`` was the last number it showed: the mark is
        exact from now on, so a later replay marks only numbers shown and not stored."""
        with self._database.transaction(f"settle the frame numbers of {session_id}") as db:
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
        if self._database.read_only_cause is not None:
            with self._database.transaction(f"read the frame log of {session_id}", read=True) as db:
                require_session(db, session_id)
                stored = _stored_seq(db, session_id)
                reserved, exact = _reserved(db, session_id)
            if reserved <= stored:
                return stored
            # The number after them is kept for the mark, written once the store recovers.
            self._recovery.owe_seal(session_id, stored, reserved, exact)
            return reserved + 1
        with self._database.transaction(f"number the frames of {session_id} on") as db:
            require_session(db, session_id)
            return self._seal_abandoned(db, session_id)

    def write_owed_seal(self, session_id: str, stored: int, reserved: int, exact: bool) -> None:
        """The gap mark ``resume_seq`` owed while the store was read-only, written now."""
        with self._database.transaction(f"mark the frames of {session_id} never stored") as db:
            _write_seal(db, session_id, stored, reserved, exact)

    def _seal_abandoned(self, db: sqlite3.Connection, session_id: str) -> int:
        """In a write transaction: store a gap mark for the numbers reserved past the last
        stored frame, numbered after them; returns the number the log now ends at."""
        stored = _stored_seq(db, session_id)
        reserved, exact = _reserved(db, session_id)
        if reserved <= stored:
            return stored
        _write_seal(db, session_id, stored, reserved, exact)
        logger.warning(
            "session %s: frames %d to %d were numbered and never stored (%s)",
            session_id,
            stored + 1,
            reserved,
            "the store refused them" if exact else "the agent stopped first",
        )
        return reserved + 1

    # --- reading --------------------------------------------------------------------------

    def last_seq(self, session_id: str) -> int:
        """The number of the session's last stored frame; 0 if it has none."""
        with self._database.transaction(f"read the frame log of {session_id}", read=True) as db:
            require_session(db, session_id)
            return _stored_seq(db, session_id)

    def shown_call_ids(self, session_id: str) -> frozenset[str]:
        """The ``toolCallId`` of every card the session's stored frames opened: a process that
        opens the session again must not give a new card one of them."""
        with self._database.transaction(f"load the tool calls of {session_id}", read=True) as db:
            require_session(db, session_id)
            # A damaged row is no card (its replay says so); it must not stop the session.
            rows = db.execute(
                "SELECT json_extract(f, '$.toolCallId') FROM ("
                " SELECT CASE WHEN json_valid(CAST(frame AS TEXT)) THEN CAST(frame AS TEXT) END"
                " AS f FROM frames WHERE session_id = ?"
                ") WHERE json_extract(f, '$.sessionUpdate') = 'tool_call'",
                (session_id,),
            ).fetchall()
        return frozenset(call_id for (call_id,) in rows if isinstance(call_id, str))

    def encoded_frames(
        self, session_id: str, after_seq: int = 0, through_seq: int | None = None
    ) -> tuple[bytes, ...]:
        """The frame log after frame ``after_seq`` (up to ``through_seq``, or its end), as
        stored (compact JSON), for a replay that relays bytes as they are; where numbers are
        missing, a ``gap_mark`` says so.

        Decoding and encoding again cost a long session's replay a third of its
        time; the store wrote these bytes itself, and each is checked to be one
        JSON object so a damaged row cannot break the client's stream.
        """
        with self._database.transaction(f"load the frames of {session_id}", read=True) as db:
            require_session(db, session_id)
            rows = db.execute(
                "SELECT seq, frame FROM frames WHERE session_id = ? AND seq > ? AND seq <= ? "
                "ORDER BY seq",
                (session_id, after_seq, _LAST_SEQ if through_seq is None else through_seq),
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
                    f"session {session_id} in {self._database.path} is damaged and cannot be "
                    "loaded: a stored frame is not a JSON object"
                )
            if seq > expected and not _marks(frame, expected - 1, seq - 1):
                frames.append(orjson.dumps(gap_mark(seq - expected, expected - 1)))
            frames.append(frame)
            expected = seq + 1
        if through_seq is not None:
            # A part of the log (a live session's older frames): numbers missing at its end
            # were refused, as any inside it were.
            if through_seq >= expected:
                frames.append(orjson.dumps(gap_mark(through_seq - expected + 1, expected - 1)))
            return tuple(frames)
        # Numbers reserved past the last stored frame by a process that no longer serves the
        # session (one that does still numbers on, and stores, what it shows: unless the
        # store cannot be written now, when it keeps them to write once it can).
        if reserved >= expected:
            cause: GapCause | None = "refused" if exact else "stopped"
            if owner is not None and owner_alive(owner):
                cause = "pending" if self._database.unwritable_now() is not None else None
            if cause is not None:
                mark = gap_mark(reserved - expected + 1, expected - 1, cause)
                frames.append(orjson.dumps(mark))
        return tuple(frames)


_LAST_SEQ: Final = 2**63 - 1
"""SQLite's largest integer: no frame is numbered past it."""


def _write_seal(
    db: sqlite3.Connection, session_id: str, stored: int, reserved: int, exact: bool
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
