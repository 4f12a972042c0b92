"""``OpenCards``: the cards a process that died left open, closed so a replay never shows a
card that spins forever.

``frame_log`` tracks the cards among the stored frames that are not terminal yet
(``open_cards``). After a crash each of them gets its terminal discard, appended to its
session's log: at start-up for every session, and for one session as it is opened again.
"""

from __future__ import annotations

import logging
from typing import Any

from toolprep.messages.frames import DiscardReason, discarded
from toolprep.runtime.store.database import StoreDatabase
from toolprep.runtime.store.frame_log import FrameLog
from toolprep.runtime.store.ownership import owner_alive
from toolprep.runtime.store.recovery import ReadOnlyRecovery

__all__ = ["OpenCards"]

logger = logging.getLogger(__name__)


class OpenCards:
    """Closes the cards left open by processes that are gone; ``owner`` is this process."""

    def __init__(
        self,
        database: StoreDatabase,
        recovery: ReadOnlyRecovery,
        frame_log: FrameLog,
        owner: str,
    ) -> None:
        self._database = database
        self._recovery = recovery
        self._frame_log = frame_log
        self._owner = owner

    def close_open_cards(self, session_id: str | None = None) -> int:
        """Append a terminal discard for every card a process that died left open.

        ``interrupted`` for a card whose ``in_progress`` frame was stored (its call
        may have run), ``crash`` for one whose call had not started.

        For every session (at start-up) or for one about to be opened again;
        sessions served by a live process, this one included, are left alone.
        Returns how many cards it closed. A read-only store closes none: for every
        session, it owes them and writes them once it can be written again.
        """
        with self._database.lock:
            if self._database.read_only is not None:
                self._recovery.owe_cards(every_session=session_id is None)
                logger.warning(
                    "the cards a crash left open are not closed: the session store cannot be "
                    "written (%s)",
                    self._database.read_only,
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
        with self._database.transaction("close the cards left open") as db:
            rows = db.execute(query + " ORDER BY open_cards.session_id", params).fetchall()
        served: dict[str | None, bool] = {}
        open_cards = []
        for sid, call_id, tool_name, started, owner in rows:
            if owner not in served:
                # A session this process just claimed to open again is not served yet.
                claimed = session_id is not None and owner == self._owner
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
            self._frame_log.append_frames(session_id, frames)
        return len(open_cards)
