"""``WorkerHost``: a ``SessionHost`` whose sessions run in worker processes.

The front owns no actors and builds no frames of its own in the common
path: it picks a worker for each new session, forwards calls to it by
session id, and relays what the worker sends back. One reader thread per
worker hands that worker's frames to the sessions' sinks in the order they
left the worker, and a prompt's result travels on the same pipe behind the
turn's frames, so every ordering guarantee of ``session_host`` holds here
exactly as inside the worker.

A sink may answer a session's request on the spot, inside ``send_request``
(an editor that replied before the agent finished handing the request on),
and that call runs on the reader thread of the worker that asked. The front
never waits there for the worker's reply, which only that same thread could
read: such an answer goes to the worker without waiting for its receipt.

What the front does know is which tool-call cards each session has open
(the worker names them in each frame's header). That is what lets it keep
the boundary's promise when a worker dies: every open card gets its
terminal update, the prompt resolves with an error, and a replacement
worker takes the sessions over; sessions on other workers never notice.
"""

from __future__ import annotations

import itertools
import logging
import signal
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, assert_never

from toolprep.messages.content import Part
from toolprep.messages.frames import DiscardReason, discarded
from toolprep.messages.modes import SessionMode
from toolprep.messages.permissions import PermissionOutcome, check_outcome
from toolprep.messages.turns import TurnResult, UserMessage
from toolprep.runtime.kernel.session_host import (
    NO_EDITOR,
    EditorAnswer,
    EditorCapabilities,
    FrameSink,
    HostClosed,
    NoWorkerAvailable,
    SessionConfig,
    SessionHostError,
    SessionInfo,
    SessionServedElsewhere,
    StoreReadOnly,
    UnknownModel,
    UnknownSession,
)
from toolprep.runtime.mcp.policy import McpRefused
from toolprep.runtime.mcp.specs import McpServerSpec
from toolprep.runtime.tools.process_groups import signal_group
from toolprep.runtime.workers.backoff import RestartBackoff, SlotHealth
from toolprep.runtime.workers.process import WorkerProcess, WorkerSpec
from toolprep.runtime.workers.protocol import (
    AnswerEditor,
    AnswerPermission,
    Cancel,
    Close,
    Command,
    ConfigReturned,
    ErrorKind,
    Event,
    FlushJournal,
    Open,
    OpenHow,
    Prompt,
    ProtocolError,
    Raised,
    Ready,
    Requested,
    Returned,
    ServedElsewhereRaised,
    SetMode,
    SetModel,
    ShowConfig,
    Shutdown,
    ToolGroupChanged,
    TurnEnded,
    UnknownModelRaised,
    Updated,
)
from toolprep.runtime.workers.transport import PlacementLog, TransportFactory, WorkerTransport
from toolprep.runtime.workers.wire import WireError

if TYPE_CHECKING:
    from toolprep.runtime.store import SessionStore

logger = logging.getLogger(__name__)

__all__ = ["WorkerCrashed", "WorkerHost"]

CALL_TIMEOUT_S = 30.0
"""How long a call that needs the worker's answer (open, answers) waits for it."""

ON_READER_THREAD = (
    "waiting for a worker's reply on a worker's reader thread would stall its frames "
    "until the call timed out; call {call} from another thread"
)

_STARTED = b'"status":"in_progress"'
"""How a card's encoded frame says its call started: a worker that dies after it leaves a
card that may have run (``interrupted``), not one that never ran."""

_CLOSES_REMEMBERED = 4096
"""Closed sessions whose worker the front remembers (a reopen soon after goes there)."""


class WorkerCrashed(SessionHostError):
    """The worker process serving a session is gone (and may be being replaced)."""


DEFAULT_BACKOFF = RestartBackoff()


CallKind = Literal["open", "prompt", "answer"]

Answer = str | bool | SessionConfig | None
"""What a call other than a prompt returns: an opened session's id, an answer taken or
not, a session's settings, or nothing."""

ToCommand = Callable[[int], Command]
"""A command to a session's worker, given the id its reply will quote."""


@dataclass(eq=False)
class _Call:
    kind: CallKind
    session: _Session
    future: Future[Answer] = field(default_factory=Future)
    turn: Future[TurnResult] = field(default_factory=Future)
    """A prompt's result (``kind == "prompt"``); ``future`` for every other call."""


@dataclass(frozen=True, slots=True)
class _Deferred:
    """A prompt that arrived while its session's worker was being replaced."""

    parts: tuple[Part, ...]
    user_message: UserMessage | None
    result: Future[TurnResult]


@dataclass(eq=False)
class _Session:
    session_id: str
    sink: FrameSink
    cwd: str
    editor: EditorCapabilities
    worker: _Worker
    open_cards: dict[str, tuple[str, bool]] = field(default_factory=dict)
    """Each open card's tool, and whether its call started (it may have run)."""
    prompts: set[int] = field(default_factory=set)
    # Prompts that arrived while the session's worker was being replaced.
    deferred: list[_Deferred] = field(default_factory=list)
    closed: bool = False
    # Sent with every open, so a replacement worker starts them again.
    mcp_servers: tuple[McpServerSpec, ...] = ()
    model: str | None = None  # chosen by set_model; given again to a replacement worker
    mode: SessionMode | None = None  # chosen by set_mode; likewise


class _Worker:
    """One worker, whatever carries its frames, and the front's bookkeeping for it."""

    def __init__(self, transport: WorkerTransport) -> None:
        self.transport = transport
        self.slot = transport.slot
        self.alive = False
        self.sessions: dict[str, _Session] = {}
        self.calls: dict[int, _Call] = {}
        self.tool_groups: set[int] = set()
        self.thread: threading.Thread | None = None
        self.ready_at = 0.0

    @property
    def pid(self) -> int:
        return self.transport.pid

    def await_ready(self) -> None:
        self.transport.await_ready()
        self.ready_at = time.monotonic()
        self.alive = True

    def stop_now(self) -> None:
        """Kill the worker and release it (one that never served, or is not wanted)."""
        self.transport.kill()
        self.transport.wait(5.0)
        self.transport.close()


class WorkerHost:
    """Sessions spread over ``workers`` processes built from ``spec``; see the module doc.

    A worker that ends is replaced in its slot, at once after a first crash and
    after a growing wait (``backoff``) when it keeps dying; meanwhile its sessions'
    prompts fail naming the wait, and new sessions go to other slots, or fail with
    ``NoWorkerAvailable`` when every slot waits.
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
    ) -> None:
        """``store`` is the file the workers' runtimes journal into (their factory opens
        it); given it, the host also serves as a ``SessionArchive``. ``transport`` starts
        a slot's worker (default: a child process running ``spec``; a Ray shard actor
        with ``toolprep.runtime.ray_host``). ``placements`` is told where each session
        is opened and when it is closed."""
        if workers < 1:
            raise ValueError(f"a worker host needs at least one worker, not {workers}")
        self._spec = spec
        self._store = store
        self._lock = threading.Lock()
        self._sessions: dict[str, _Session] = {}
        # Where each recently closed session ran: opened again, it goes back there, where
        # its runtime lets it in only once its last close is written.
        self._closed_on: OrderedDict[str, _Worker] = OrderedDict()
        self._call_ids = itertools.count(1)
        self._closed = False
        self._backoff = backoff
        self._health = {slot: SlotHealth() for slot in range(workers)}
        self._stopping = threading.Event()  # wakes slots waiting out their back-off
        self._replacing: set[int] = set()
        self.restarts = 0
        self._placements = placements
        # Marks the reader threads: a call made on one must not wait for a worker's reply.
        self._reading = threading.local()
        self._start: TransportFactory = transport or (lambda slot: WorkerProcess(slot, spec))
        started = [_Worker(self._start(slot)) for slot in range(workers)]
        try:
            for worker in started:
                worker.await_ready()
        except BaseException:
            for worker in started:
                worker.stop_now()
            raise
        self._workers: list[_Worker] = started
        for worker in started:
            self._start_reading(worker)

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
        with self._lock:
            if self._closed:
                raise HostClosed("the worker host is shut down")
            if session_id in self._sessions:
                raise ValueError(f"a session with this id is already open: {session_id}")
            live = [w for w in self._workers if w.alive]
            if not live:
                now = time.monotonic()
                health = self._health.items()
                raise NoWorkerAvailable(
                    "; ".join(h.describe(slot, now) for slot, h in health),
                    min(h.retry_after(now) for _slot, h in health),
                )
            last = self._closed_on.pop(session_id, None)
            worker = last if last in live else min(live, key=lambda w: len(w.sessions))
            session = _Session(session_id, sink, cwd, editor, worker, mcp_servers=mcp_servers)
            self._sessions[session_id] = session
            worker.sessions[session_id] = session
        try:
            self._open_on(worker, session, how).result(CALL_TIMEOUT_S)
        except BaseException:
            with self._lock:
                self._sessions.pop(session_id, None)
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
            live = session_id in self._sessions
        if live:
            # Attached to this front's one client already: replay it once its worker's
            # journal has written what it sent, and the session goes on where it is.
            if replay:
                self._ask(session_id, lambda call_id: FlushJournal(call_id, session_id))
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
            is_open = session_id in self._sessions
        if is_open:
            self.close_session(session_id)
        if self._store is None:
            raise UnknownSession(session_id)
        self._store.sessions.delete(session_id)

    def prompt(
        self, session_id: str, parts: Sequence[Part], user_message: UserMessage | None = None
    ) -> Future[TurnResult]:
        with self._lock:
            session = self._require(session_id)
            if self._closed:
                return _resolved(TurnResult(None, error="the worker host is shutting down"))
            worker = session.worker
            parts = tuple(parts)
            if not worker.alive:
                if worker.slot not in self._replacing:
                    return _resolved(TurnResult(None, error=self._down(worker)))
                later: Future[TurnResult] = Future()
                session.deferred.append(_Deferred(parts, user_message, later))
                return later
            call_id, call = self._register(worker, "prompt", session)
            session.prompts.add(call_id)
        self._send(worker, Prompt(call_id, session_id, parts, user_message))
        return call.turn

    def cancel(self, session_id: str) -> None:
        with self._lock:
            worker = self._require(session_id).worker
        self._send(worker, Cancel(session_id))

    def answer_permission(
        self, session_id: str, request_id: str, outcome: PermissionOutcome
    ) -> bool:
        check_outcome(outcome)
        return self._answer(
            session_id,
            request_id,
            lambda call_id: AnswerPermission(call_id, session_id, request_id, outcome),
        )

    def answer_editor(self, session_id: str, request_id: str, answer: EditorAnswer) -> bool:
        return self._answer(
            session_id,
            request_id,
            lambda call_id: AnswerEditor(call_id, session_id, request_id, answer),
        )

    def session_config(self, session_id: str) -> SessionConfig:
        return _config(self._ask(session_id, lambda call_id: ShowConfig(call_id, session_id)))

    def set_model(self, session_id: str, model: str) -> SessionConfig:
        config = _config(
            self._ask(session_id, lambda call_id: SetModel(call_id, session_id, model))
        )
        with self._lock:
            self._require(session_id).model = model  # given again to a replacement worker
        return config

    def set_mode(self, session_id: str, mode: SessionMode) -> SessionConfig:
        config = _config(self._ask(session_id, lambda call_id: SetMode(call_id, session_id, mode)))
        with self._lock:
            self._require(session_id).mode = mode  # given again to a replacement worker
        return config

    def close_session(self, session_id: str) -> None:
        with self._lock:
            session = self._require(session_id)
            del self._sessions[session_id]
            session.closed = True
            worker = session.worker
            # A running turn's last frames (its discards) and its result still
            # come through; the routing entry goes with the turn's result.
            if not session.prompts:
                worker.sessions.pop(session_id, None)
            waiting = self._take_deferred(session)
            self._closed_on[session_id] = worker
            while len(self._closed_on) > _CLOSES_REMEMBERED:
                self._closed_on.popitem(last=False)
        for deferred in waiting:
            deferred.result.set_result(TurnResult("cancelled"))
        self._send(worker, Close(session_id))
        if self._placements is not None:
            self._placements.forgot(session_id)

    def shutdown(self, timeout: float = 10.0) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            workers = list(self._workers)
        self._stopping.set()
        deadline = time.monotonic() + timeout
        for worker in workers:
            if worker.alive:  # a slot waiting out its back-off has no worker to tell
                self._send(worker, Shutdown(timeout))
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

    def worker_pids(self) -> list[int]:
        """The running workers' process ids, by slot (operators and drills use them)."""
        with self._lock:
            return [w.pid for w in self._workers if w.alive]

    def slot_of(self, session_id: str) -> int:
        """The worker slot serving ``session_id`` (placement checks and drills use it)."""
        with self._lock:
            return self._require(session_id).worker.slot

    def kill_tool_processes_now(self) -> None:
        """Ask every worker to kill its tool processes and exit; safe in a signal handler."""
        for worker in list(self._workers):
            worker.transport.interrupt()

    # --- calls to workers -----------------------------------------------------------------

    def _require(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise UnknownSession(session_id)
        return session

    def _down(self, worker: _Worker) -> str:
        """Why ``worker`` takes no calls; called with the lock held."""
        health = self._health[worker.slot]
        if health.crashes:
            return f"no worker available: {health.describe(worker.slot, time.monotonic())}"
        return f"the worker process serving this session (slot {worker.slot}) is not running"

    def _register(self, worker: _Worker, kind: CallKind, session: _Session) -> tuple[int, _Call]:
        """Note a call awaiting ``worker``'s answer; called with the lock held."""
        if not worker.alive:
            raise WorkerCrashed(self._down(worker))
        call_id = next(self._call_ids)
        call = _Call(kind, session)
        worker.calls[call_id] = call
        return call_id, call

    def _open_on(self, worker: _Worker, session: _Session, how: OpenHow) -> Future[Answer]:
        with self._lock:
            call_id, call = self._register(worker, "open", session)
        sid, cwd, editor = session.session_id, session.cwd, session.editor
        self._send(worker, Open(call_id, sid, cwd, editor, how, session.mcp_servers))
        return call.future

    def _answer(self, session_id: str, request_id: str, command: ToCommand) -> bool:
        """Give the session's worker an answer; False if no live worker took it in time.

        On a reader thread (a sink answering inside ``send_request``) the answer is
        only sent: True then means it is on its way, and a worker that finds the
        request no longer waiting says so in the log.
        """
        if self._on_reader_thread():
            return self._send_answer(session_id, request_id, command)
        try:
            taken = bool(self._ask(session_id, command))
        except (WorkerCrashed, TimeoutError) as exc:
            logger.warning("the answer to %s for %s was not taken: %r", request_id, session_id, exc)
            return False
        return taken

    def _send_answer(self, session_id: str, request_id: str, command: ToCommand) -> bool:
        """Send an answer without waiting for the worker's receipt."""
        with self._lock:
            session = self._require(session_id)
            worker = session.worker
            try:
                call_id, call = self._register(worker, "answer", session)
            except WorkerCrashed:
                return False

        def receipt(done: Future[Answer]) -> None:
            if done.exception() is None and not done.result():
                logger.info("the answer to %s for %s came too late", request_id, session_id)

        call.future.add_done_callback(receipt)
        self._send(worker, command(call_id))
        return True

    def _on_reader_thread(self) -> bool:
        return getattr(self._reading, "worker", None) is not None

    def _ask(self, session_id: str, command: ToCommand) -> Answer:
        """Send ``command`` to the session's worker and wait for what it returns."""
        if self._on_reader_thread():
            raise RuntimeError(ON_READER_THREAD.format(call=type(command(0)).__name__))
        with self._lock:
            session = self._require(session_id)
            call_id, call = self._register(session.worker, "answer", session)
            worker = session.worker
        self._send(worker, command(call_id))
        try:
            return call.future.result(CALL_TIMEOUT_S)
        except TimeoutError:
            with self._lock:
                worker.calls.pop(call_id, None)
            raise

    def _send(self, worker: _Worker, command: Command) -> None:
        """Write to ``worker``; a dead worker's reader settles whatever this call awaited."""
        try:
            worker.transport.send(command)
        except OSError as exc:
            logger.warning(
                "worker %d is unreachable (%r); its reader ends its turns", worker.slot, exc
            )

    # --- what workers send ------------------------------------------------------------------

    def _start_reading(self, worker: _Worker) -> None:
        worker.thread = threading.Thread(
            target=self._read, args=(worker,), name=f"toolprep-worker-{worker.slot}", daemon=True
        )
        worker.thread.start()

    def _read(self, worker: _Worker) -> None:
        self._reading.worker = worker
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
        self._worker_ended(worker)

    def _relay_update(
        self, session: _Session, card: tuple[str, str, bool] | None, payload: bytes
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

    def _handle(self, worker: _Worker, event: Event) -> None:
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
                self._settle(worker, call_id, value)
            case ConfigReturned(call_id, config):
                self._settle(worker, call_id, config)
            case TurnEnded(call_id, result):
                self._settle(worker, call_id, result)
            case UnknownModelRaised(call_id, model, models):
                self._settle(worker, call_id, UnknownModel(model, list(models)))
            case ServedElsewhereRaised(call_id, sid, holder):
                self._settle(worker, call_id, SessionServedElsewhere(sid, holder))
            case Raised(call_id, kind, message):
                self._settle(worker, call_id, _error(kind, message))
            case Updated() | Ready():
                raise ProtocolError(f"{event!r} out of place")
            case _:
                assert_never(event)

    def _settle(
        self, worker: _Worker, call_id: int, outcome: Answer | TurnResult | Exception
    ) -> None:
        with self._lock:
            call = worker.calls.pop(call_id, None)
            if call is None:
                return
            session = call.session
            if call.kind == "prompt":
                session.prompts.discard(call_id)
                if session.closed and not session.prompts:
                    worker.sessions.pop(session.session_id, None)
        match call.kind, outcome:
            case "prompt", TurnResult():
                call.turn.set_result(outcome)
            case "prompt", StoreReadOnly():  # refused, as the runtime refuses it
                call.turn.set_exception(outcome)
            case "prompt", Exception():
                call.turn.set_result(TurnResult(None, error=str(outcome)))
            case "prompt", _:
                call.turn.set_result(TurnResult(None, error=f"the worker answered {outcome!r}"))
            case _, Exception():
                call.future.set_exception(outcome)
            case _, TurnResult():
                call.future.set_exception(ProtocolError(f"a turn result for a {call.kind} call"))
            case _, _:
                call.future.set_result(outcome)

    # --- a worker that ended ----------------------------------------------------------------

    def _worker_ended(self, worker: _Worker) -> None:
        with self._lock:
            worker.alive = False
            closing = self._closed
            if not closing:
                self._replacing.add(worker.slot)
            calls, worker.calls = worker.calls, {}
            for call_id in calls:  # answered below: a later close must not wait for them
                calls[call_id].session.prompts.discard(call_id)
            sessions = list(worker.sessions.values())
        how = worker.transport.exit_description()
        for pgid in worker.tool_groups:  # what the worker could not stop itself
            signal_group(pgid, signal.SIGKILL)
        if not closing:
            logger.error("worker %d (pid %d) %s", worker.slot, worker.pid, how)
        lost = f"the worker process serving this session {how}; the turn was lost"
        for session in sessions:
            self._discard_open_cards(session)
        for call in calls.values():
            match call.kind:
                case "prompt":
                    call.turn.set_result(TurnResult(None, error=lost))
                case "open" | "answer":
                    call.future.set_exception(WorkerCrashed(lost))
        worker.transport.close()
        if not closing:
            self._replace(worker, how, [s for s in sessions if not s.closed])

    def _discard_open_cards(self, session: _Session) -> None:
        cards, session.open_cards = session.open_cards, {}
        for call_id, (tool_name, started) in cards.items():
            reason: DiscardReason = "interrupted" if started else "crash"
            try:
                session.sink.send_update(session.session_id, discarded(call_id, tool_name, reason))
            except Exception:
                logger.exception("the sink of %s failed on a discard", session.session_id)

    def _replace(self, dead: _Worker, how: str, sessions: list[_Session]) -> None:
        """Start a successor in ``dead``'s slot and move its sessions over."""
        successor = self._successor(dead, how, sessions)
        if successor is not None:
            for session in sessions:
                self._move(session, successor)
        with self._lock:
            self._replacing.discard(dead.slot)
            stranded = [s for s in sessions if s.worker is dead]
            waiting = [d.result for s in stranded for d in self._take_deferred(s)]
        for later in waiting:  # the host shut down meanwhile
            later.set_result(TurnResult(None, error="the worker host is shutting down"))
        if successor is not None:
            logger.warning(
                "worker %d replaced (pid %d); %d sessions moved over",
                dead.slot,
                successor.pid,
                len(sessions) - len(stranded),
            )

    def _successor(self, dead: _Worker, how: str, sessions: list[_Session]) -> _Worker | None:
        """A started worker in ``dead``'s slot, once the back-off its crashes in a row
        earned has passed (``backoff``); None once the host shuts down.

        While the slot waits, prompts to its sessions fail at once, naming the wait,
        rather than hang until it ends.
        """
        slot = dead.slot
        up_for = time.monotonic() - dead.ready_at
        while True:
            now = time.monotonic()
            waiting: list[Future[TurnResult]] = []
            with self._lock:
                health = self._health[slot]
                delay = health.crashed(now, up_for, how, self._backoff)
                if delay > 0:
                    health.restart_at = now + delay
                    self._replacing.discard(slot)
                    why = health.describe(slot, now)
                    stranded = [s for s in sessions if s.worker is dead]
                    waiting = [d.result for s in stranded for d in self._take_deferred(s)]
            if delay > 0:
                logger.error("%s", why)
                for later in waiting:
                    later.set_result(TurnResult(None, error=f"no worker available: {why}"))
                if self._stopping.wait(delay):
                    return None
                with self._lock:
                    health.restart_at = None
                    if self._closed:
                        return None
                    self._replacing.add(slot)
            try:
                successor = _Worker(self._start(slot))
                successor.await_ready()
            except SessionHostError as exc:  # it said why: no traceback of ours helps
                logger.error("worker %d could not be restarted: %s", slot, exc)
                how, up_for = str(exc).removeprefix(f"worker {slot} "), 0.0
                continue
            except Exception as exc:
                logger.exception("worker %d could not be restarted", slot)
                how, up_for = str(exc).removeprefix(f"worker {slot} "), 0.0
                continue
            with self._lock:
                if not self._closed:
                    self._workers[slot] = successor
                    self.restarts += 1
                    self._start_reading(successor)
                    return successor
            successor.stop_now()
            return None

    def _move(self, session: _Session, successor: _Worker) -> None:
        """Reopen ``session`` on ``successor``, then send the prompts it received meanwhile."""
        with self._lock:
            if session.closed:
                return
            successor.sessions[session.session_id] = session  # its frames route from now on
        try:
            # Its history comes back from the store when there is one.
            self._open_on(successor, session, "restore_or_new").result(CALL_TIMEOUT_S)
            sid, model, mode = session.session_id, session.model, session.mode
            settings: list[ToCommand] = []
            if model is not None:
                settings.append(lambda call_id: SetModel(call_id, sid, model))
            if mode is not None:
                settings.append(lambda call_id: SetMode(call_id, sid, mode))
            for setting in settings:
                with self._lock:
                    call_id, call = self._register(successor, "answer", session)
                self._send(successor, setting(call_id))
                call.future.result(CALL_TIMEOUT_S)
        except Exception:
            logger.exception("reopening %s on the new worker failed", session.session_id)
            with self._lock:
                successor.sessions.pop(session.session_id, None)
            return
        with self._lock:
            # Switched under the lock together with sending what waited, so a prompt
            # arriving now queues behind those instead of overtaking them.
            session.worker = successor
            for deferred in self._take_deferred(session):
                call_id, call = self._register(successor, "prompt", session)
                call.turn = deferred.result
                session.prompts.add(call_id)
                prompt = Prompt(call_id, session.session_id, deferred.parts, deferred.user_message)
                self._send(successor, prompt)

    @staticmethod
    def _take_deferred(session: _Session) -> list[_Deferred]:
        deferred, session.deferred = session.deferred, []
        return deferred


def _resolved(result: TurnResult) -> Future[TurnResult]:
    future: Future[TurnResult] = Future()
    future.set_result(result)
    return future


def _config(answer: Answer) -> SessionConfig:
    if not isinstance(answer, SessionConfig):
        raise ProtocolError(f"a worker answered {answer!r} where a session's settings belong")
    return answer


def _error(kind: ErrorKind, message: str) -> Exception:
    match kind:
        case "unknown_session":
            return SessionHostError(message)
        case "host_closed":
            return HostClosed(message)
        case "mcp_refused":
            return McpRefused(message)
        case "store_read_only":  # the message is the cause
            return StoreReadOnly(message)
        case "invalid":
            return ValueError(message)
        case "failed":
            return SessionHostError(message)
        case _:
            assert_never(kind)
