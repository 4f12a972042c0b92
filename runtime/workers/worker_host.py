"""``WorkerHost``: a ``SessionHost`` whose sessions run in worker processes.

The front owns no actors and builds no frames of its own in the common
path: it picks a worker for each new session, forwards calls to it by
session id, and relays what the worker sends back. Its parts each have a
module: what it knows of workers and sessions (``host_state``), the calls it
makes to workers and their answers (``worker_calls``), the reader of each
worker's frames (``worker_reader``), and what it does when a worker ends
(``worker_restarts``).

What the front does know is which tool-call cards each session has open
(the worker names them in each frame's header). That is what lets it keep
the boundary's promise when a worker dies: every open card gets its
terminal update, the prompt resolves with an error, and a replacement
worker takes the sessions over; sessions on other workers never notice.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING

from toolprep.messages.content import Part
from toolprep.messages.modes import SessionMode
from toolprep.messages.permissions import PermissionOutcome, check_outcome
from toolprep.messages.turns import TurnResult, UserMessage
from toolprep.runtime.kernel.observer import NO_OBSERVER, TurnObserver
from toolprep.runtime.kernel.session_host import (
    NO_EDITOR,
    EditorAnswer,
    EditorCapabilities,
    FrameSink,
    HostClosed,
    NoWorkerAvailable,
    SessionConfig,
    SessionInfo,
    UnknownSession,
)
from toolprep.runtime.mcp.specs import McpServerSpec
from toolprep.runtime.workers.backoff import RestartBackoff
from toolprep.runtime.workers.host_state import (
    DeferredPrompt,
    HostState,
    RoutedSession,
    WorkerCrashed,
    WorkerSlot,
)
from toolprep.runtime.workers.process import WorkerProcess, WorkerSpec
from toolprep.runtime.workers.protocol import (
    AnswerEditor,
    AnswerPermission,
    Cancel,
    Close,
    FlushJournal,
    OpenHow,
    Prompt,
    ReadMetrics,
    SetMode,
    SetModel,
    ShowConfig,
    Shutdown,
)
from toolprep.runtime.workers.transport import PlacementLog, TransportFactory
from toolprep.runtime.workers.worker_calls import CALL_TIMEOUT_S, WorkerCalls, config_of
from toolprep.runtime.workers.worker_reader import WorkerReader
from toolprep.runtime.workers.worker_restarts import WorkerRestarts

if TYPE_CHECKING:
    from toolprep.runtime.store import SessionStore

logger = logging.getLogger(__name__)

METRICS_WAIT_S = 2.0
"""How long a scrape of ``/metrics`` waits for the workers' metrics: a busy worker answers
from its reader thread at once, so only a wedged one is left out."""

__all__ = ["DEFAULT_BACKOFF", "WorkerCrashed", "WorkerHost"]

_CLOSES_REMEMBERED = 4096
"""Closed sessions whose worker the front remembers (a reopen soon after goes there)."""

DEFAULT_BACKOFF = RestartBackoff()


class WorkerHost:
    """Sessions spread over ``workers`` processes built from ``spec``; see the module doc.

    A worker that ends is replaced in its slot, at once after a first crash and
    after a growing wait (``backoff``) when it keeps dying; meanwhile every call to its
    sessions (a prompt, a setting, a reload) is refused with ``NoWorkerAvailable``
    naming the wait, and new sessions go to other slots, or are refused so when every
    slot waits.
    """

    def __init__(
        self,
        spec: WorkerSpec,
        workers: int,
        *,
        backoff: RestartBackoff = DEFAULT_BACKOFF,
        store: SessionStore | None = None,
        transport: TransportFactory | None = None,
        placements: PlacementLog | None = None,
        observer: TurnObserver = NO_OBSERVER,
    ) -> None:
        """``store`` is the file the workers' runtimes journal into (their factory opens
        it); given it, the host also serves as a ``SessionArchive``. ``transport`` starts
        a slot's worker (default: a child process running ``spec``; a Ray shard actor
        with ``toolprep.runtime.ray_host``). ``placements`` is told where each session
        is opened and when it is closed; ``observer`` of each worker that ended unasked."""
        if workers < 1:
            raise ValueError(f"a worker host needs at least one worker, not {workers}")
        self._spec = spec
        self._store = store
        self._state = state = HostState(workers)
        self._lock = state.lock
        # Where each recently closed session ran: opened again, it goes back there, where
        # its runtime lets it in only once its last close is written.
        self._closed_on: OrderedDict[str, WorkerSlot] = OrderedDict()
        self._placements = placements
        start: TransportFactory = transport or (lambda slot: WorkerProcess(slot, spec))
        self._calls = calls = WorkerCalls(state)
        self._reader = WorkerReader(calls, ended=self._worker_ended)
        self._restarts = WorkerRestarts(state, calls, start, backoff, self._reader.start, observer)
        started = [WorkerSlot(start(slot)) for slot in range(workers)]
        try:
            for worker in started:
                worker.await_ready()
        except BaseException:
            for worker in started:
                worker.stop_now()
            raise
        state.workers = started
        for worker in started:
            self._reader.start(worker)

    @property
    def restarts(self) -> int:
        """How many workers were started to replace one that ended."""
        return self._state.restarts

    def _worker_ended(self, worker: WorkerSlot) -> None:
        self._restarts.worker_ended(worker)

    # --- the SessionHost calls ------------------------------------------------------------

    def open_session(
        self,
        cwd: str | Path,
        sink: FrameSink,
        session_id: str | None = None,
        *,
        editor: EditorCapabilities = NO_EDITOR,
        mcp_servers: Sequence[McpServerSpec] = (),
    ) -> str:
        session_id = session_id or f"sess_{uuid.uuid4().hex}"
        cwd = str(Path(cwd).resolve())
        self._place(session_id, cwd, sink, editor, "new", tuple(mcp_servers))
        return session_id

    def _place(
        self,
        session_id: str,
        cwd: str,
        sink: FrameSink,
        editor: EditorCapabilities,
        how: OpenHow,
        mcp_servers: tuple[McpServerSpec, ...],
    ) -> None:
        """Open the session on the least loaded live worker."""
        state = self._state
        with self._lock:
            if state.closed:
                raise HostClosed("the worker host is shut down")
            if session_id in state.sessions:
                raise ValueError(f"a session with this id is already open: {session_id}")
            live = [w for w in state.workers if w.alive]
            if not live:
                now = time.monotonic()
                health = state.health.items()
                raise NoWorkerAvailable(
                    "; ".join(h.describe(slot, now) for slot, h in health),
                    min(h.retry_after(now) for _slot, h in health),
                )
            last = self._closed_on.pop(session_id, None)
            worker = last if last in live else min(live, key=lambda w: len(w.sessions))
            session = RoutedSession(session_id, sink, cwd, editor, worker, mcp_servers=mcp_servers)
            state.sessions[session_id] = session
            worker.sessions[session_id] = session
        try:
            self._calls.open_on(worker, session, how).result(CALL_TIMEOUT_S)
        except BaseException:
            with self._lock:
                state.sessions.pop(session_id, None)
                worker.sessions.pop(session_id, None)
            raise
        if self._placements is not None:
            self._placements.placed(session_id, worker.slot)

    # --- SessionArchive, when given the store the workers journal into ---------------------

    def load_session(
        self,
        session_id: str,
        sink: FrameSink,
        *,
        editor: EditorCapabilities = NO_EDITOR,
        replay: bool = True,
        mcp_servers: Sequence[McpServerSpec] = (),
        after_seq: int = 0,
    ) -> None:
        if self._store is None:
            raise UnknownSession(session_id)
        with self._lock:
            live = session_id in self._state.sessions
        if live:
            # Attached to this front's one client already: replay it once its worker's
            # journal has written what it sent, and the session goes on where it is.
            if replay:
                self._calls.ask(session_id, lambda call_id: FlushJournal(call_id, session_id))
                for frame in self._store.frame_log.encoded_frames(session_id, after_seq):
                    sink.send_encoded_update(session_id, frame)
            return
        info = self._store.sessions.info(session_id)
        self._place(session_id, info.cwd, sink, editor, "restore", tuple(mcp_servers))
        if replay:
            # The worker closed what a crash had left open before it restored the session,
            # and no turn can start before this returns, so nothing overtakes these.
            for frame in self._store.frame_log.encoded_frames(session_id, after_seq):
                sink.send_encoded_update(session_id, frame)

    def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None
    ) -> tuple[list[SessionInfo], str | None]:
        if self._store is None:
            return [], None
        return self._store.sessions.list_sessions(cwd, cursor)

    def delete_session(self, session_id: str) -> None:
        with self._lock:
            session = self._state.sessions.get(session_id)
            worker = session.worker if session is not None else None
        if worker is not None:
            self.close_session(session_id)
            # The worker's close ends the running turn and writes its last frames and history
            # before the worker takes its next command: once it answers one, nothing of the
            # session is left to write, so its rows can go without a write finding them gone.
            # A worker that died meanwhile writes nothing any more either.
            with contextlib.suppress(WorkerCrashed):
                self._calls.ask_worker(worker, lambda call_id: FlushJournal(call_id, session_id))
        if self._store is None:
            raise UnknownSession(session_id)
        self._store.sessions.delete(session_id)

    def prompt(
        self, session_id: str, parts: Sequence[Part], user_message: UserMessage | None = None
    ) -> Future[TurnResult]:
        state = self._state
        with self._lock:
            session = state.require(session_id)
            if state.closed:
                return _resolved(TurnResult(None, error="the worker host is shutting down"))
            worker = session.worker
            parts = tuple(parts)
            if not worker.alive:
                if worker.slot not in state.replacing:  # it waits out its back-off
                    raise state.down(worker)
                later: Future[TurnResult] = Future()
                session.deferred.append(DeferredPrompt(parts, user_message, later))
                return later
            call_id, call = self._calls.register(worker, "prompt", session)
            session.prompts.add(call_id)
        self._calls.send(worker, Prompt(call_id, session_id, parts, user_message))
        return call.turn

    def cancel(self, session_id: str, reason: str | None = None) -> None:
        with self._lock:
            worker = self._state.require(session_id).worker
        self._calls.send(worker, Cancel(session_id, reason))

    def answer_permission(
        self, session_id: str, request_id: str, outcome: PermissionOutcome
    ) -> bool:
        check_outcome(outcome)
        return self._calls.answer(
            session_id,
            request_id,
            lambda call_id: AnswerPermission(call_id, session_id, request_id, outcome),
        )

    def answer_editor(self, session_id: str, request_id: str, answer: EditorAnswer) -> bool:
        return self._calls.answer(
            session_id,
            request_id,
            lambda call_id: AnswerEditor(call_id, session_id, request_id, answer),
        )

    def session_config(self, session_id: str) -> SessionConfig:
        return config_of(
            self._calls.ask(session_id, lambda call_id: ShowConfig(call_id, session_id))
        )

    def set_model(self, session_id: str, model: str) -> SessionConfig:
        config = config_of(
            self._calls.ask(session_id, lambda call_id: SetModel(call_id, session_id, model))
        )
        with self._lock:
            self._state.require(session_id).model = model  # given again to a replacement worker
        return config

    def set_mode(self, session_id: str, mode: SessionMode) -> SessionConfig:
        config = config_of(
            self._calls.ask(session_id, lambda call_id: SetMode(call_id, session_id, mode))
        )
        with self._lock:
            self._state.require(session_id).mode = mode  # given again to a replacement worker
        return config

    def close_session(self, session_id: str) -> None:
        with self._lock:
            session = self._state.require(session_id)
            del self._state.sessions[session_id]
            session.closed = True
            worker = session.worker
            # A running turn's last frames (its discards) and its result still
            # come through; the routing entry goes with the turn's result.
            if not session.prompts:
                worker.sessions.pop(session_id, None)
            waiting = session.take_deferred()
            self._closed_on[session_id] = worker
            while len(self._closed_on) > _CLOSES_REMEMBERED:
                self._closed_on.popitem(last=False)
        for deferred in waiting:
            deferred.result.set_result(TurnResult("cancelled"))
        self._calls.send(worker, Close(session_id))
        if self._placements is not None:
            self._placements.forgot(session_id)

    def shutdown(self, timeout: float = 10.0) -> None:
        with self._lock:
            if self._state.closed:
                return
            self._state.closed = True
            workers = list(self._state.workers)
        self._state.stopping.set()
        deadline = time.monotonic() + timeout
        for worker in workers:
            if worker.alive:  # a slot waiting out its back-off has no worker to tell
                self._calls.send(worker, Shutdown(timeout))
        for worker in workers:
            if worker.thread is not None:
                worker.thread.join(max(0.0, deadline - time.monotonic()))
            if not worker.transport.wait(max(0.1, deadline - time.monotonic())):
                logger.warning("worker %d did not stop in time; killing it", worker.slot)
                worker.transport.kill()
                worker.transport.wait(5.0)
            if worker.thread is not None:
                worker.thread.join(5.0)
            worker.transport.close()

    # --- beyond the boundary ----------------------------------------------------------------

    def read_worker_metrics(self) -> list[tuple[int, str]]:
        """Each live worker's slot and metrics in the Prometheus text format, for a scrape
        of the front's ``/metrics`` (a worker that does not answer in time is left out)."""
        answers = self._calls.ask_each_worker(ReadMetrics, METRICS_WAIT_S)
        return [(slot, text) for slot, text in answers if isinstance(text, str) and text]

    def worker_pids(self) -> list[int]:
        """The running workers' process ids, by slot (operators and drills use them)."""
        with self._lock:
            return [w.pid for w in self._state.workers if w.alive]

    def slot_of(self, session_id: str) -> int:
        """The worker slot serving ``session_id`` (placement checks and drills use it)."""
        with self._lock:
            return self._state.require(session_id).worker.slot

    def kill_tool_processes_now(self) -> None:
        """Ask every worker to kill its tool processes and exit; safe in a signal handler."""
        for worker in list(self._state.workers):
            worker.transport.interrupt()


def _resolved(result: TurnResult) -> Future[TurnResult]:
    future: Future[TurnResult] = Future()
    future.set_result(result)
    return future
