"""What a worker host does when one of its workers ends.

It keeps the boundary's promise for that worker's sessions: every open card
gets its terminal update, every call awaiting the worker is answered with an
error, and a successor started in the same slot takes the sessions over (their
history from the store, their chosen model and mode again, then the prompts
that waited meanwhile); sessions on other workers never notice. A slot whose
workers keep dying waits a growing back-off before the next start.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from concurrent.futures import Future

from toolprep.messages.frames import DiscardReason, discarded
from toolprep.messages.turns import TurnResult
from toolprep.runtime.kernel.observer import NO_OBSERVER, TurnObserver
from toolprep.runtime.kernel.session_host import NoWorkerAvailable, SessionHostError
from toolprep.runtime.tools.process_groups import signal_group
from toolprep.runtime.workers.backoff import RestartBackoff
from toolprep.runtime.workers.host_state import (
    HostState,
    RoutedSession,
    ToCommand,
    WorkerCrashed,
    WorkerSlot,
)
from toolprep.runtime.workers.protocol import Prompt, SetMode, SetModel
from toolprep.runtime.workers.transport import TransportFactory
from toolprep.runtime.workers.worker_calls import CALL_TIMEOUT_S, WorkerCalls

logger = logging.getLogger(__name__)

__all__ = ["WorkerRestarts"]


class WorkerRestarts:
    """Ends what a dead worker left open and replaces it in its slot."""

    def __init__(
        self,
        state: HostState,
        calls: WorkerCalls,
        start: TransportFactory,
        backoff: RestartBackoff,
        start_reading: Callable[[WorkerSlot], None],
        observer: TurnObserver = NO_OBSERVER,
    ) -> None:
        self._observer = observer  # hears of each worker that ended unasked
        self._state = state
        self._calls = calls
        self._start = start
        self._backoff = backoff
        self._start_reading = start_reading

    def worker_ended(self, worker: WorkerSlot) -> None:
        """Answer what ``worker`` left open, then replace it unless the host shuts down."""
        state = self._state
        with state.lock:
            worker.alive = False
            closing = state.closed
            if not closing:
                state.replacing.add(worker.slot)
            calls, worker.calls = worker.calls, {}
            for call_id, call in calls.items():  # answered below: a close must not wait
                if call.session is not None:
                    call.session.prompts.discard(call_id)
            sessions = list(worker.sessions.values())
            up_for = time.monotonic() - worker.ready_at
            wait = state.health[worker.slot].next_wait(up_for, self._backoff)
        how = worker.transport.exit_description()
        for pgid in worker.tool_groups:  # what the worker could not stop itself
            signal_group(pgid, signal.SIGKILL)
        if not closing:
            logger.error("worker %d (pid %d) %s", worker.slot, worker.pid, how)
            self._observer.worker_ended(worker.slot, how, len(sessions))
        lost = f"the worker process serving this session {how}; the turn was lost"
        for session in sessions:
            _discard_open_cards(session)
        for call in calls.values():
            match call.kind:
                case "prompt":
                    call.turn.set_result(TurnResult(None, error=lost))
                case "open":  # a new or loaded session: asked again on a successor
                    gone = f"the worker process opening this session {how}"
                    call.future.set_exception(WorkerCrashed(gone, wait))
                case "answer":  # asked again once a successor serves the session
                    gone = f"the worker process serving this session {how}"
                    call.future.set_exception(WorkerCrashed(gone, wait))
        worker.transport.close()
        if not closing:
            self._replace(worker, how, [s for s in sessions if not s.closed])

    def _replace(self, dead: WorkerSlot, how: str, sessions: list[RoutedSession]) -> None:
        """Start a successor in ``dead``'s slot and move its sessions over."""
        successor = self._successor(dead, how, sessions)
        if successor is not None:
            for session in sessions:
                self._move(session, successor)
        with self._state.lock:
            self._state.replacing.discard(dead.slot)
            stranded = [s for s in sessions if s.worker is dead]
            waiting = [d.result for s in stranded for d in s.take_deferred()]
        for later in waiting:  # the host shut down meanwhile
            later.set_result(TurnResult(None, error="the worker host is shutting down"))
        if successor is not None:
            logger.warning(
                "worker %d replaced (pid %d); %d sessions moved over",
                dead.slot,
                successor.pid,
                len(sessions) - len(stranded),
            )

    def _successor(
        self, dead: WorkerSlot, how: str, sessions: list[RoutedSession]
    ) -> WorkerSlot | None:
        """A started worker in ``dead``'s slot, once the back-off its crashes in a row
        earned has passed (``backoff``); None once the host shuts down.

        While the slot waits, prompts to its sessions are refused at once with
        ``NoWorkerAvailable``, naming the wait, rather than hang until it ends.
        """
        state = self._state
        slot = dead.slot
        up_for = time.monotonic() - dead.ready_at
        while True:
            now = time.monotonic()
            waiting: list[Future[TurnResult]] = []
            refusal: NoWorkerAvailable | None = None
            with state.lock:
                health = state.health[slot]
                delay = health.crashed(now, up_for, how, self._backoff)
                if delay > 0:
                    health.restart_at = now + delay
                    state.replacing.discard(slot)
                    refusal = NoWorkerAvailable(health.describe(slot, now), delay)
                    stranded = [s for s in sessions if s.worker is dead]
                    waiting = [d.result for s in stranded for d in s.take_deferred()]
            if refusal is not None:
                logger.error("%s", refusal)
                for later in waiting:  # refused as a prompt arriving now is (-32005)
                    later.set_exception(refusal)
                if state.stopping.wait(delay):
                    return None
                with state.lock:
                    health.restart_at = None
                    if state.closed:
                        return None
                    state.replacing.add(slot)
            try:
                successor = WorkerSlot(self._start(slot))
                successor.await_ready()
            except SessionHostError as exc:  # it said why: no traceback of ours helps
                logger.error("worker %d could not be restarted: %s", slot, exc)
                how, up_for = str(exc).removeprefix(f"worker {slot} "), 0.0
                continue
            except Exception as exc:
                logger.exception("worker %d could not be restarted", slot)
                how, up_for = str(exc).removeprefix(f"worker {slot} "), 0.0
                continue
            with state.lock:
                if not state.closed:
                    state.workers[slot] = successor
                    state.restarts += 1
                    self._start_reading(successor)
                    return successor
            successor.stop_now()
            return None

    def _move(self, session: RoutedSession, successor: WorkerSlot) -> None:
        """Reopen ``session`` on ``successor``, then send the prompts it received meanwhile."""
        lock, calls = self._state.lock, self._calls
        with lock:
            if session.closed:
                return
            successor.sessions[session.session_id] = session  # its frames route from now on
        try:
            # Its history comes back from the store when there is one.
            calls.open_on(successor, session, "restore_or_new").result(CALL_TIMEOUT_S)
            sid, model, mode = session.session_id, session.model, session.mode
            settings: list[ToCommand] = []
            if model is not None:
                settings.append(lambda call_id: SetModel(call_id, sid, model))
            if mode is not None:
                settings.append(lambda call_id: SetMode(call_id, sid, mode))
            for setting in settings:
                with lock:
                    call_id, call = calls.register(successor, "answer", session)
                calls.send(successor, setting(call_id))
                call.future.result(CALL_TIMEOUT_S)
        except Exception:
            logger.exception("reopening %s on the new worker failed", session.session_id)
            with lock:
                successor.sessions.pop(session.session_id, None)
            return
        with lock:
            # Switched under the lock together with sending what waited, so a prompt
            # arriving now queues behind those instead of overtaking them.
            session.worker = successor
            for deferred in session.take_deferred():
                call_id, call = calls.register(successor, "prompt", session)
                call.turn = deferred.result
                session.prompts.add(call_id)
                prompt = Prompt(call_id, session.session_id, deferred.parts, deferred.user_message)
                calls.send(successor, prompt)


def _discard_open_cards(session: RoutedSession) -> None:
    cards, session.open_cards = session.open_cards, {}
    for call_id, (tool_name, started) in cards.items():
        reason: DiscardReason = "interrupted" if started else "crash"
        try:
            session.sink.send_update(session.session_id, discarded(call_id, tool_name, reason))
        except Exception:
            logger.exception("the sink of %s failed on a discard", session.session_id)
