"""The reader of one worker's frames: relays them to sinks and settles calls.

One reader thread per worker hands that worker's frames to the sessions' sinks
in the order they left the worker, and a prompt's result travels on the same
pipe behind the turn's frames, so every ordering guarantee of ``session_host``
holds here exactly as inside the worker. The reader also notes which tool-call
cards each session has open (the worker names them in each frame's header):
what a worker's death must close.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import assert_never

from toolprep.runtime.kernel.session_host import SessionServedElsewhere, UnknownModel
from toolprep.runtime.workers.host_state import RoutedSession, WorkerSlot
from toolprep.runtime.workers.protocol import (
    ConfigReturned,
    Event,
    ProtocolError,
    Raised,
    Ready,
    Requested,
    Returned,
    ServedElsewhereRaised,
    ToolGroupChanged,
    TurnEnded,
    UnknownModelRaised,
    Updated,
)
from toolprep.runtime.workers.wire import WireError
from toolprep.runtime.workers.worker_calls import WorkerCalls, error_of

logger = logging.getLogger(__name__)

__all__ = ["WorkerReader"]

_STARTED = b'"status":"in_progress"'
"""How a card's encoded frame says its call started: a worker that dies after it leaves a
card that may have run (``interrupted``), not one that never ran."""


class WorkerReader:
    """Starts a reader thread per worker; ``ended`` runs on it once the worker is gone."""

    def __init__(self, calls: WorkerCalls, ended: Callable[[WorkerSlot], None]) -> None:
        self._calls = calls
        self._ended = ended

    def start(self, worker: WorkerSlot) -> None:
        worker.thread = threading.Thread(
            target=self._read, args=(worker,), name=f"toolprep-worker-{worker.slot}", daemon=True
        )
        worker.thread.start()

    def _read(self, worker: WorkerSlot) -> None:
        self._calls.mark_reader_thread(worker)
        sessions = worker.sessions
        read = worker.transport.read
        try:
            while (event := read()) is not None:
                if type(event) is Updated:  # the common case first
                    session = sessions.get(event.session_id)
                    if session is not None:
                        self._relay_update(session, event.card, event.update_json)
                else:
                    self._handle(worker, event)
        except (WireError, ProtocolError, OSError, ValueError) as exc:
            logger.error("worker %d sent a broken frame: %s", worker.slot, exc)
            worker.transport.kill()
        self._ended(worker)

    def _relay_update(
        self, session: RoutedSession, card: tuple[str, str, bool] | None, payload: bytes
    ) -> None:
        if card is not None:
            call_id, tool_name, terminal = card
            if terminal:
                session.open_cards.pop(call_id, None)
            else:
                _, started = session.open_cards.get(call_id, (tool_name, False))
                started = started or _STARTED in payload
                session.open_cards[call_id] = (tool_name, started)
        try:
            session.sink.send_encoded_update(session.session_id, payload)
        except Exception:
            logger.exception("the sink of %s failed on a frame", session.session_id)

    def _handle(self, worker: WorkerSlot, event: Event) -> None:
        settle = self._calls.settle
        match event:
            case Requested(session_id, request):
                session = worker.sessions.get(session_id)
                if session is None:
                    return
                try:
                    session.sink.send_request(session_id, request)
                except Exception:
                    logger.exception("the sink of %s failed on a request", session_id)
            case ToolGroupChanged(pgid, live):
                if live:
                    worker.tool_groups.add(pgid)
                else:
                    worker.tool_groups.discard(pgid)
            case Returned(call_id, value):
                settle(worker, call_id, value)
            case ConfigReturned(call_id, config):
                settle(worker, call_id, config)
            case TurnEnded(call_id, result):
                settle(worker, call_id, result)
            case UnknownModelRaised(call_id, model, models):
                settle(worker, call_id, UnknownModel(model, list(models)))
            case ServedElsewhereRaised(call_id, sid, holder):
                settle(worker, call_id, SessionServedElsewhere(sid, holder))
            case Raised(call_id, kind, message):
                settle(worker, call_id, error_of(kind, message))
            case Updated() | Ready():
                raise ProtocolError(f"{event!r} out of place")
            case _:
                assert_never(event)
