"""``NumberingJournal``: the emitter's ``FrameJournal`` for a runtime without a store.

Frames are numbered in their session's log (``_meta.toolprep.seq``) all the
same, so a client of a daemon that keeps sessions in memory only
(``toolprep serve --no-persist``) resumes after the last frame it saw: the
daemon's copy of the live session is the log then. Nothing outlives the
process, so there is nothing to reserve or store.
"""

from __future__ import annotations

from typing import Any

from toolprep.messages.content import Content
from toolprep.messages.frames import numbered

__all__ = ["NumberingJournal"]


class NumberingJournal:
    """Numbers each session's frames from 1; called from the emitter's thread only."""

    def __init__(self) -> None:
        self._last_seq: dict[str, int] = {}

    def record(self, session_id: str, update: dict[str, Any]) -> dict[str, Any]:
        seq = self._last_seq.get(session_id, 0) + 1
        self._last_seq[session_id] = seq
        return numbered(update, seq)

    def commit(self, session_id: str) -> str | None:
        return None

    def turn_ended(
        self, session_id: str, history: tuple[Content, ...], *, rewritten: bool = False
    ) -> dict[str, Any] | None:
        return None
