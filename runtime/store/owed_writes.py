"""``OwedWrites``: the frames the store refused while it could not be written, kept to be
written once it can.

A full or read-only disk refuses the journal's writes, yet the clients saw those frames
(a card's end among them: it is shown whatever the store answered). Kept here, they are
written under their own numbers as soon as the store takes writes again (the session's
next write carries them, and the store's recovery hands the writer the rest), so a replay
then shows what the clients saw, a card shown completed completed. The frames kept are
bounded (``MAX_OWED_BYTES`` in all, as encoded): past that, a batch is dropped and its
numbers stay a gap, which a replay marks. A session's settled high-water mark is owed the
same way, after its frames. What is owed when the agent stops is lost: the next process's
replay marks the numbers as a gap.

Used by the journal's writer thread only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import orjson

from toolprep.runtime.store.errors import StoreError
from toolprep.runtime.store.session_store import SessionStore

__all__ = ["MAX_OWED_BYTES", "OwedWrites"]

logger = logging.getLogger(__name__)

MAX_OWED_BYTES = 8 * 1024 * 1024
"""Frames kept for a store that cannot be written, in all, as encoded: a few thousand cards'
ends, or a handful of long tool outputs."""


@dataclass(slots=True)
class _Owed:
    frames: list[dict[str, Any]] = field(default_factory=list)
    size: int = 0
    settle: int | None = None
    dropping: bool = False
    """A frame of it was dropped: the later ones are too, so what is kept has no hole (a
    card's end never kept without its opening)."""


class OwedWrites:
    """Per session, what the store refused and is to be written once it can be."""

    def __init__(self, max_bytes: int = MAX_OWED_BYTES) -> None:
        self.max_bytes = max_bytes
        self._sessions: dict[str, _Owed] = {}
        self._size = 0
        self.dropped = 0
        """Frames refused and not kept (past ``max_bytes``): their numbers stay a gap."""

    @property
    def size(self) -> int:
        """The encoded size of the frames kept."""
        return self._size

    def __bool__(self) -> bool:
        return bool(self._sessions)

    def sessions(self) -> list[str]:
        return list(self._sessions)

    def owe_frames(self, session_id: str, frames: list[dict[str, Any]]) -> None:
        """Keep ``frames`` (refused, in order, after any kept before them) as far as they
        fit: the oldest first, since a card's end needs its opening before it."""
        owed = self._sessions.setdefault(session_id, _Owed())
        kept = 0
        size = 0
        for frame in frames if not owed.dropping else ():
            encoded = len(orjson.dumps(frame))
            if self._size + size + encoded > self.max_bytes:
                owed.dropping = True
                break
            kept += 1
            size += encoded
        if kept < len(frames):
            self.dropped += len(frames) - kept
            logger.error(
                "%d frames of %s are not kept to be written later: %d bytes are owed already "
                "(at most %d); a replay marks them as not saved",
                len(frames) - kept,
                session_id,
                self._size + size,
                self.max_bytes,
            )
        owed.frames.extend(frames[:kept])
        owed.size += size
        self._size += size

    def owe_settle(self, session_id: str, last: int) -> None:
        """The session's high-water mark, settled at ``last`` once its frames are written."""
        self._sessions.setdefault(session_id, _Owed()).settle = last

    def pending(self, session_id: str) -> list[dict[str, Any]]:
        """The frames kept for the session, to be written before its newer ones (they stay
        kept until ``written`` says they are)."""
        owed = self._sessions.get(session_id)
        return list(owed.frames) if owed is not None else []

    def written(self, session_id: str) -> None:
        """The session's kept frames are stored now: forget them (its settled mark stays
        owed, written after them)."""
        owed = self._sessions.get(session_id)
        if owed is None:
            return
        self._size -= owed.size
        owed.frames, owed.size, owed.dropping = [], 0, False
        if owed.settle is None:
            del self._sessions[session_id]

    def take_settle(self, session_id: str) -> int | None:
        """The settled mark kept for the session once its frames are written, forgotten."""
        owed = self._sessions.get(session_id)
        if owed is None or owed.frames:
            return None
        del self._sessions[session_id]
        return owed.settle

    def discard(self, session_id: str) -> None:
        """Nothing of the session is to be written (it was deleted meanwhile)."""
        owed = self._sessions.pop(session_id, None)
        if owed is not None:
            self._size -= owed.size

    def pay(self, store: SessionStore) -> None:
        """Write what is owed, session by session, if ``store`` can be written now; raises
        ``SessionStoreReadOnly`` (or the ``StoreError`` of a write that found it unwritable
        again) leaving the rest owed."""
        if not self._sessions:
            return
        store.recovery.require_writable()
        for session_id in self.sessions():
            frames = self.pending(session_id)
            try:
                if frames:
                    store.frame_log.append_frames(session_id, frames)
                    logger.warning(
                        "session %s: %d frames the store refused are written now",
                        session_id,
                        len(frames),
                    )
            except StoreError:
                if store.database.read_only_cause is not None:
                    raise  # still owed
                logger.exception("session %s: the frames owed are not written", session_id)
                self.discard(session_id)  # deleted meanwhile, say
                continue
            self.written(session_id)
            last = self.take_settle(session_id)
            if last is None:
                continue
            try:
                store.frame_log.settle_seq(session_id, last)
            except StoreError:
                if store.database.read_only_cause is None:
                    continue
                self.owe_settle(session_id, last)
                raise

    def lose(self) -> None:
        """The writer stops: what is still owed is lost (a replay marks its numbers)."""
        if self._sessions:
            logger.error(
                "the session store could not be written: %d bytes of frames of %d sessions "
                "are lost with this process (a replay marks them as not saved)",
                self._size,
                len(self._sessions),
            )
