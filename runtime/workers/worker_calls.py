"""The calls a worker host makes to its workers, and how their answers come back.

Each call that needs a worker's answer gets an id its reply quotes; the
reader of that worker settles it (``settle``), or, should the worker die,
its death does. A sink may answer a session's request on the spot, inside
``send_request``, on the reader thread of the worker that asked: the front
never waits there for the worker's reply, which only that same thread could
read, so such an answer goes to the worker without waiting for its receipt.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from concurrent.futures import Future
from typing import assert_never

from toolprep.messages.turns import TurnResult
from toolprep.runtime.kernel.session_host import (
    HostClosed,
    SessionConfig,
    SessionHostError,
    StoreReadOnly,
)
from toolprep.runtime.mcp.policy import McpRefused
from toolprep.runtime.workers.host_state import (
    Answer,
    CallKind,
    HostState,
    PendingCall,
    RoutedSession,
    ToCommand,
    WorkerCrashed,
    WorkerSlot,
)
from toolprep.runtime.workers.protocol import Command, ErrorKind, Open, OpenHow, ProtocolError

logger = logging.getLogger(__name__)

__all__ = ["CALL_TIMEOUT_S", "ON_READER_THREAD", "WorkerCalls", "config_of", "error_of"]

CALL_TIMEOUT_S = 30.0
"""How long a call that needs the worker's answer (open, answers) waits for it."""

ON_READER_THREAD = (
    "waiting for a worker's reply on a worker's reader thread would stall its frames "
    "until the call timed out; call {call} from another thread"
)


class WorkerCalls:
    """Sends commands to workers and matches their answers to the calls awaiting them."""

    def __init__(self, state: HostState) -> None:
        self._state = state
        self._call_ids = itertools.count(1)
        # Marks the reader threads: a call made on one must not wait for a worker's reply.
        self._reading = threading.local()

    def mark_reader_thread(self, worker: WorkerSlot) -> None:
        """Note that this thread reads ``worker``'s frames (no call here may wait)."""
        self._reading.worker = worker

    def on_reader_thread(self) -> bool:
        return getattr(self._reading, "worker", None) is not None

    def register(
        self, worker: WorkerSlot, kind: CallKind, session: RoutedSession | None
    ) -> tuple[int, PendingCall]:
        """Note a call awaiting ``worker``'s answer; called with the lock held."""
        if not worker.alive:
            raise self._state.down(worker)
        call_id = next(self._call_ids)
        call = PendingCall(kind, session)
        worker.calls[call_id] = call
        return call_id, call

    def open_on(self, worker: WorkerSlot, session: RoutedSession, how: OpenHow) -> Future[Answer]:
        with self._state.lock:
            call_id, call = self.register(worker, "open", session)
        sid, cwd, editor = session.session_id, session.cwd, session.editor
        self.send(worker, Open(call_id, sid, cwd, editor, how, session.mcp_servers))
        return call.future

    def answer(self, session_id: str, request_id: str, command: ToCommand) -> bool:
        """Give the session's worker an answer; False if no live worker took it in time.

        On a reader thread (a sink answering inside ``send_request``) the answer is
        only sent: True then means it is on its way, and a worker that finds the
        request no longer waiting says so in the log.
        """
        if self.on_reader_thread():
            return self._send_answer(session_id, request_id, command)
        try:
            taken = bool(self.ask(session_id, command))
        except (WorkerCrashed, TimeoutError) as exc:
            logger.warning("the answer to %s for %s was not taken: %r", request_id, session_id, exc)
            return False
        return taken

    def _send_answer(self, session_id: str, request_id: str, command: ToCommand) -> bool:
        """Send an answer without waiting for the worker's receipt."""
        with self._state.lock:
            session = self._state.require(session_id)
            worker = session.worker
            try:
                call_id, call = self.register(worker, "answer", session)
            except WorkerCrashed:
                return False

        def receipt(done: Future[Answer]) -> None:
            if done.exception() is None and not done.result():
                logger.info("the answer to %s for %s came too late", request_id, session_id)

        call.future.add_done_callback(receipt)
        self.send(worker, command(call_id))
        return True

    def ask(self, session_id: str, command: ToCommand) -> Answer:
        """Send ``command`` to the session's worker and wait for what it returns."""
        self._refuse_on_reader_thread(command)
        with self._state.lock:
            session = self._state.require(session_id)
            worker = session.worker
            call_id, call = self.register(worker, "answer", session)
        return self._send_and_wait(worker, call_id, call, command)

    def ask_worker(self, worker: WorkerSlot, command: ToCommand) -> Answer:
        """Send ``command`` to ``worker`` itself (of no session) and wait for its answer.

        The worker carries out commands in the order they come, so the answer also says
        that every command sent to it before has been carried out."""
        self._refuse_on_reader_thread(command)
        with self._state.lock:
            call_id, call = self.register(worker, "answer", None)
        return self._send_and_wait(worker, call_id, call, command)

    def _refuse_on_reader_thread(self, command: ToCommand) -> None:
        if self.on_reader_thread():
            raise RuntimeError(ON_READER_THREAD.format(call=type(command(0)).__name__))

    def _send_and_wait(
        self, worker: WorkerSlot, call_id: int, call: PendingCall, command: ToCommand
    ) -> Answer:
        self.send(worker, command(call_id))
        try:
            return call.future.result(CALL_TIMEOUT_S)
        except TimeoutError:
            with self._state.lock:
                worker.calls.pop(call_id, None)
            raise

    def ask_each_worker(self, command: ToCommand, timeout: float) -> list[tuple[int, Answer]]:
        """Send ``command`` to every live worker at once (a question to the worker itself,
        of no session) and wait up to ``timeout`` s in all: each slot that answered, with
        its answer. A worker that does not answer in time, or dies, is left out."""
        asked: list[tuple[WorkerSlot, int, PendingCall]] = []
        with self._state.lock:
            for worker in self._state.workers:
                if worker.alive:
                    call_id, call = self.register(worker, "answer", None)
                    asked.append((worker, call_id, call))
        for worker, call_id, _ in asked:
            self.send(worker, command(call_id))
        deadline = time.monotonic() + timeout
        answers: list[tuple[int, Answer]] = []
        for worker, call_id, call in asked:
            try:
                answers.append((worker.slot, call.future.result(deadline - time.monotonic())))
            except (TimeoutError, WorkerCrashed) as exc:
                logger.warning("worker %d did not answer %s: %r", worker.slot, command(0), exc)
                with self._state.lock:
                    worker.calls.pop(call_id, None)
        return answers

    def send(self, worker: WorkerSlot, command: Command) -> None:
        """Write to ``worker``; a dead worker's reader settles whatever this call awaited."""
        try:
            worker.transport.send(command)
        except OSError as exc:
            logger.warning(
                "worker %d is unreachable (%r); its reader ends its turns", worker.slot, exc
            )

    def settle(
        self, worker: WorkerSlot, call_id: int, outcome: Answer | TurnResult | Exception
    ) -> None:
        """Resolve the call ``call_id`` with what ``worker`` answered to it."""
        with self._state.lock:
            call = worker.calls.pop(call_id, None)
            if call is None:
                return
            session = call.session
            if call.kind == "prompt" and session is not None:
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


def config_of(answer: Answer) -> SessionConfig:
    """A worker's answer that must be a session's settings."""
    if not isinstance(answer, SessionConfig):
        raise ProtocolError(f"a worker answered {answer!r} where a session's settings belong")
    return answer


def error_of(kind: ErrorKind, message: str) -> Exception:
    """The exception a worker's ``Raised`` stands for, as the runtime would raise it."""
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
