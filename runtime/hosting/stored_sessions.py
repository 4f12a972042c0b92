"""What a ``Runtime`` reads from its session store: to restore, replay and list sessions.

The store is written behind the roles, by the journal; every read that must see
what the roles recorded so far waits for the journal first (``wait_for_journal``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from toolprep.messages.content import Content, FunctionCallPart, FunctionResponsePart
from toolprep.messages.modes import SessionMode, check_mode
from toolprep.runtime.kernel.session_host import FrameSink, SessionInfo
from toolprep.runtime.providers.routes import ModelRoute
from toolprep.runtime.store import SessionStore, StoredSession
from toolprep.runtime.store.journal import StoreJournal

logger = logging.getLogger(__name__)

__all__ = ["JOURNAL_WAIT_S", "Restorable", "StoredSessions", "history_call_ids", "route_of"]

JOURNAL_WAIT_S = 5.0
"""How long reading the store, releasing a session or shutting down waits for the journal."""


@dataclass(frozen=True, slots=True)
class Restorable:
    """A stored session as it opens again: what was stored, its route, mode and shown ids."""

    stored: StoredSession
    route: int
    mode: SessionMode
    shown_call_ids: frozenset[str]


class StoredSessions:
    """Reads the store once the journal has written what the roles recorded."""

    def __init__(
        self,
        store: SessionStore | None,
        journal: StoreJournal | None,
        routes: Sequence[ModelRoute],
        default_mode: SessionMode,
    ) -> None:
        self._store = store
        self._journal = journal
        self._routes = routes
        self._default_mode = default_mode

    def flush_journal(self, timeout: float = JOURNAL_WAIT_S) -> bool:
        """Wait until the frames and histories recorded so far are in the store.

        True once they are (and at once without a store); False if ``timeout``
        passed first. A running turn's frames since its last finished card
        are held until that card or the turn ends, so they are not waited for.
        """
        return self._journal is None or self._journal.flush(timeout)

    def wait_for_journal(self, doing: str) -> None:
        if not self.flush_journal():
            logger.warning(
                "%s before the journal's last writes: the store did not take them within %.0f s",
                doing,
                JOURNAL_WAIT_S,
            )

    def read_for_restore(self, store: SessionStore, session_id: str, frames: bool) -> Restorable:
        """Claim a stored session for this process and read it to open it again."""
        # First: a card's queued terminal update must land before close_open_cards discards it.
        self.wait_for_journal(f"restoring {session_id}")
        store.claims.claim(session_id)  # refused while another live process serves it
        store.cards.close_open_cards(session_id)  # what a crash of its last process left open
        stored = store.sessions.load(session_id, frames=frames)
        route = route_of(self._routes, stored.info.model)
        mode = self._stored_mode(store, session_id)
        # Every id a card of it showed, and every call id in its history (a card's frames may
        # be lost with a crash): a provider that numbers its ids the same way each process
        # (the replay does) must not open a card the editor would take for an old one.
        shown = store.frame_log.shown_call_ids(session_id) | history_call_ids(stored.history)
        return Restorable(stored, route, mode, shown)

    def replay(self, session_id: str, sink: FrameSink, after_seq: int) -> None:
        """Send ``sink`` the session's stored frames after ``after_seq``."""
        if self._store is not None:
            for frame in self._store.frame_log.encoded_frames(session_id, after_seq):
                sink.send_encoded_update(session_id, frame)

    def list_sessions(
        self, cwd: str | None, cursor: str | None
    ) -> tuple[list[SessionInfo], str | None]:
        if self._store is None:
            return [], None
        self.wait_for_journal("listing sessions")
        return self._store.sessions.list_sessions(cwd, cursor)

    def _stored_mode(self, store: SessionStore, session_id: str) -> SessionMode:
        """The mode the store kept for the session; the default if it kept none it knows."""
        stored = store.sessions.mode_of(session_id)
        if stored is None:
            return self._default_mode
        try:
            return check_mode(stored)
        except ValueError as exc:
            default = self._default_mode
            logger.warning("stored mode of %s is unknown (%s); using %s", session_id, exc, default)
            return self._default_mode


def route_of(routes: Sequence[ModelRoute], model: str | None) -> int:
    """The first route serving ``model``; a model no longer configured gets the default."""
    for index, route in enumerate(routes):
        if route.model == model:
            return index
    if model is not None:
        logger.warning("stored model %r is not configured; using %s", model, routes[0].model)
    return 0


def history_call_ids(history: Sequence[Content]) -> frozenset[str]:
    """The ids of the tool calls and results in a session's history."""
    ids: set[str] = set()
    for content in history:
        for part in content.parts:
            if isinstance(part, FunctionCallPart):
                ids.add(part.function_call.id)
            elif isinstance(part, FunctionResponsePart):
                ids.add(part.function_response.id)
    return frozenset(ids)
