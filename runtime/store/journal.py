"""``StoreJournal``: the emitter's ``FrameJournal`` backed by a ``SessionStore``.

Frames are buffered per session and written when a card reaches its
terminal update and when a turn ends (with the history the turn left), so
a crash loses at most the frames of the running turn since its last
finished card, and never leaves a finished card unrecorded. A store that
fails (disk full, locked) costs the record, not the session: the error is
logged and the session keeps running.
"""

from __future__ import annotations

import logging
from typing import Any

from toolprep.messages.content import Content
from toolprep.messages.frames import card_change
from toolprep.runtime.store.session_store import SessionStore, StoreError

logger = logging.getLogger(__name__)

__all__ = ["StoreJournal"]


class StoreJournal:
    """Called from the emitter's thread only, so its buffers need no lock."""

    def __init__(self, store: SessionStore) -> None:
        self.store = store
        self._pending: dict[str, list[dict[str, Any]]] = {}

    def record(self, session_id: str, update: dict[str, Any]) -> None:
        self._pending.setdefault(session_id, []).append(update)
        card = card_change(update)
        if card is not None and card[2]:
            self._flush(session_id)

    def turn_ended(self, session_id: str, history: tuple[Content, ...]) -> None:
        self._flush(session_id)
        try:
            self.store.save_history(session_id, history)
        except StoreError as exc:
            logger.error("the history of %s was not saved: %s", session_id, exc)

    def _flush(self, session_id: str) -> None:
        frames = self._pending.pop(session_id, None)
        if not frames:
            return
        try:
            self.store.append_frames(session_id, frames)
        except StoreError as exc:
            logger.error("%d frames of %s were not saved: %s", len(frames), session_id, exc)
