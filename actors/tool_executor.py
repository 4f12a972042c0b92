"""ToolExecutor: runs complete calls on a bounded worker pool.

Tools block (file IO, subprocesses, waiting for the user's permission), so
they run on a fixed pool of worker threads, never in this actor's handler.
A call that needs the user's permission keeps its card ``pending`` while it
waits: ``in_progress`` (with the complete arguments) is sent only once the
user allows it, so the card never claims a tool runs that may never run; a
rejected call goes from ``pending`` to ``failed`` with the reason.
Calls of one session run one after another in the order the model made them;
sessions run side by side. A tool that raises or times out is an ordinary
failed result: the card ends ``failed`` with the error text, and the model
sees the error. Only a call that never reached execution is *discarded*.
The session's mode, read as each call starts, may let a call run without
asking or refuse it (plan mode): a refused call's card fails saying why,
and the model is told the same.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import CancelledError as FutureCancelled
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, assert_never

from toolprep.actors.base import EMITTER, EXECUTOR, SUPERVISOR, Handlers, RoleActor
from toolprep.actors.directory import RoleDirectory
from toolprep.messages import frames
from toolprep.messages.modes import DEFAULT_MODE, SessionMode
from toolprep.messages.permissions import PERMISSION_OUTCOMES, check_outcome
from toolprep.messages.turns import (
    AskPermission,
    CallsExecuted,
    CancelTools,
    ExecuteCalls,
    SessionClosed,
    ToolCallRequest,
    ToolCallResult,
    WorkerReturned,
    WriteFrames,
)
from toolprep.runtime.kernel.scheduler import Scheduler, TimerHandle
from toolprep.runtime.kernel.threads import prestarted_pool
from toolprep.runtime.tools.base import (
    ClientFilesystem,
    PermissionOutcome,
    PermissionRequest,
    Tool,
    ToolContext,
    ToolError,
    ToolOutput,
)
from toolprep.runtime.tools.cancellation import CancelEvent
from toolprep.runtime.tools.permissions import (
    ALLOWED_OUTCOMES,
    CANCELLED_WHILE_WAITING,
    AlwaysAllowed,
    is_read_only,
    mode_rule,
    permission_scope,
    refused_in_plan_mode,
)
from toolprep.runtime.tools.registry import ToolRegistry

logger = logging.getLogger(__name__)


class HeldStart:
    """A call's ``in_progress`` frame, held back until the user allows the call.

    The worker thread releases it when the permission arrives; the actor
    settles it when the call ends. Both happen under one lock, and the frame
    is told to the emitter inside it, so it can neither come twice nor land
    after the card's terminal frame.
    """

    def __init__(
        self,
        directory: RoleDirectory,
        session_id: str,
        frame: dict[str, Any],
        *,
        write_ahead: bool,
    ) -> None:
        self._directory = directory
        self._session_id = session_id
        self._frame: dict[str, Any] | None = frame
        self._write_ahead = write_ahead
        self._lock = threading.Lock()

    def release(self) -> Future[str | None] | None:
        """Send the frame; for a call with effects, returns what says once it is stored."""
        stored: Future[str | None] | None = Future() if self._write_ahead else None
        with self._lock:
            if self._frame is None:
                return None
            self._directory.tell(EMITTER, WriteFrames.of(self._session_id, (self._frame,), stored))
            self._frame = None
        return stored

    @contextlib.contextmanager
    def settled(self) -> Iterator[dict[str, Any] | None]:
        """Yields the frame if it was never released; tell the terminal frame inside."""
        with self._lock:
            frame, self._frame = self._frame, None
            yield frame


@dataclass(slots=True)
class Batch:
    attempt: int
    cwd: str
    calls: tuple[ToolCallRequest, ...]
    index: int = 0
    results: list[ToolCallResult] = field(default_factory=list)
    context: ToolContext | None = None
    timer: TimerHandle | None = None
    held: HeldStart | None = None


@dataclass(slots=True)
class ExecutorState:
    batches: dict[str, Batch] = field(default_factory=dict)
    cancelled_through: dict[str, int] = field(default_factory=dict)
    pool: ThreadPoolExecutor | None = None
    always_allowed: AlwaysAllowed = field(default_factory=AlwaysAllowed)


class ToolExecutor(RoleActor):
    role = EXECUTOR

    def __init__(
        self,
        directory: RoleDirectory,
        state: ExecutorState,
        registry: ToolRegistry,
        scheduler: Scheduler,
        *,
        workers: int = 8,
        timeout: float = 120.0,
        client_fs_for: Callable[[str], ClientFilesystem | None] = lambda _session_id: None,
        session_tool: Callable[[str, str], Tool | None] = lambda _session_id, _name: None,
        mode_of: Callable[[str], SessionMode] = lambda _session_id: DEFAULT_MODE,
    ) -> None:
        """``session_tool(session_id, name)`` finds a tool of that session only (its MCP
        servers'); the shared ``registry`` is asked first. ``mode_of(session_id)`` is the
        session's mode now."""
        super().__init__(directory)
        self.state = state
        if state.pool is None:
            state.pool = prestarted_pool(workers, "toolprep-tool")
        self.registry = registry
        self.scheduler = scheduler
        self.timeout = timeout
        self.client_fs_for = client_fs_for
        self.session_tool = session_tool
        self.mode_of = mode_of

    def handlers(self) -> Handlers:
        return {
            ExecuteCalls: self.on_execute,
            WorkerReturned: self.on_worker_returned,
            CancelTools: self.on_cancel,
            SessionClosed: self.on_session_closed,
        }

    def _frames(self, session_id: str, *updates: dict[str, Any]) -> None:
        self.directory.tell(EMITTER, WriteFrames.of(session_id, updates))

    def on_execute(self, msg: ExecuteCalls) -> None:
        if msg.attempt <= self.state.cancelled_through.get(msg.session_id, 0):
            # Cancelled before the calls got here: they never ran, so their cards are discarded.
            self._frames(
                msg.session_id,
                *(
                    frames.discarded(c.call_id, c.call.name, "cancel")
                    for c in msg.calls
                    if c.prepared
                ),
            )
            self._report(
                msg.session_id, msg.attempt, [_cancelled(c) for c in msg.calls], cancelled=True
            )
            return
        self.state.batches[msg.session_id] = Batch(msg.attempt, msg.cwd, msg.calls)
        self._start_next(msg.session_id)

    def _start_next(self, session_id: str) -> None:
        batch = self.state.batches.get(session_id)
        if batch is None:
            return
        if batch.index >= len(batch.calls):
            del self.state.batches[session_id]
            self._report(session_id, batch.attempt, batch.results, cancelled=False)
            return
        request = batch.calls[batch.index]
        call = request.call
        tool = self.registry.get(call.name) or self.session_tool(session_id, call.name)
        if tool is None:
            self._frames(
                session_id,
                frames.execution_started(
                    request.call_id,
                    call.name,
                    title=call.name,
                    kind="other",
                    locations=(),
                    raw_input=call.args,
                    prepared=request.prepared,
                ),
            )
            self._finish_call(session_id, batch, ok=False, error=f"Unknown tool: {call.name}")
            return
        cwd = Path(batch.cwd)
        try:
            title = tool.title(call.args)
            locations = tool.locations(call.args, cwd)
        except Exception as exc:  # a tool's description must not stop the batch
            logger.warning("describing %s failed: %r", call.name, exc)
            title, locations = call.name, []
        describe = functools.partial(
            frames.execution_started,
            request.call_id,
            call.name,
            kind=tool.kind,
            locations=locations,
            raw_input=call.args,
        )
        rule = mode_rule(self.mode_of(session_id), tool)
        match rule:
            case "refused":
                refused_title, text = refused_in_plan_mode(tool)
                if not request.prepared:  # the card opens now, to say why it never runs
                    self._frames(
                        session_id, describe(title=refused_title, prepared=False, status="pending")
                    )
                self._finish_call(session_id, batch, ok=False, error=text, title=refused_title)
                return
            case "allowed":
                asks_first = False
            case "tool_decides":
                asks_first = _asks_first(tool, call.args)
            case _:
                assert_never(rule)
        describe = functools.partial(describe, title=title)
        # A call with effects runs only once its start is in the session's log, so a
        # process that dies while it runs leaves a card that says it may have run.
        write_ahead = not is_read_only(tool)
        stored: Future[str | None] | None = None
        if asks_first:
            if not request.prepared:  # the card opens now, waiting
                self._frames(session_id, describe(prepared=False, status="pending"))
            started = describe(prepared=True)
            batch.held = HeldStart(self.directory, session_id, started, write_ahead=write_ahead)
        else:
            stored = Future() if write_ahead else None
            started = describe(prepared=request.prepared)
            self.directory.tell(EMITTER, WriteFrames.of(session_id, (started,), stored))
        context = ToolContext(
            session_id=session_id,
            cwd=cwd,
            tool_call_id=request.call_id,
            timeout=self.timeout,
            client_fs=self.client_fs_for(session_id),
        )
        try:
            scope = permission_scope(tool, call.args)
        except Exception as exc:  # never "Always allow" more than this one call
            logger.warning("the permission scope of %s failed: %r", call.name, exc)
            scope = f"{call.name}: call {request.call_id}"
        context.request_permission = (
            _granted
            if rule == "allowed"
            else self._permission_asker(
                session_id, request, title, tool.kind, context.cancelled, batch.held, scope
            )
        )
        batch.context = context
        attempt, call_id = batch.attempt, request.call_id
        directory = self.directory
        assert self.state.pool is not None
        future = self.state.pool.submit(_run_once_stored, tool, call.args, context, stored)

        def done(f: Future[ToolOutput]) -> None:
            # Through the directory, so a result outlives a restart of this role.
            directory.tell(EXECUTOR, WorkerReturned(session_id, attempt, call_id, f))

        future.add_done_callback(done)
        batch.timer = self.scheduler.call_later(
            self.timeout,
            lambda: self.directory.tell(
                EXECUTOR, WorkerReturned(session_id, attempt, call_id, None, timed_out=True)
            ),
        )

    def _permission_asker(
        self,
        session_id: str,
        request: ToolCallRequest,
        title: str,
        kind: str,
        cancelled: CancelEvent,
        held: HeldStart | None,
        scope: str,
    ) -> Callable[[PermissionRequest], PermissionOutcome]:
        """Blocking permission round trip for a worker; gives up once the call is cancelled.

        An allowed call's held ``in_progress`` frame goes out before the tool goes on.
        A call within what the user already answered "Always allow" to in this
        session is not asked about again.
        """
        directory = self.directory
        always_allowed = self.state.always_allowed
        timeout = self.timeout

        def ask(permission: PermissionRequest) -> PermissionOutcome:
            if always_allowed.covers(session_id, scope):
                if held is not None and not cancelled.is_set():
                    _await_stored(held.release(), request.call.name, timeout)
                return "allow_always"
            tool_call = {
                "toolCallId": request.call_id,
                "name": request.call.name,
                "title": title,
                "kind": kind,
                "status": "pending",
                "rawInput": request.call.args,
            }
            message = AskPermission(session_id, permission, tool_call)
            cancelled.cancel_with(message.reply)
            directory.tell(EMITTER, message)
            try:
                outcome = message.reply.result()
            except FutureCancelled:
                return "cancelled"
            answer = check_outcome(outcome) if outcome in PERMISSION_OUTCOMES else "cancelled"
            if answer == "allow_always":
                always_allowed.remember(session_id, scope)
            if held is not None and answer in ALLOWED_OUTCOMES and not cancelled.is_set():
                _await_stored(held.release(), request.call.name, timeout)
            return answer

        return ask

    def on_worker_returned(self, msg: WorkerReturned) -> None:
        batch = self.state.batches.get(msg.session_id)
        if batch is None or batch.attempt != msg.attempt or batch.index >= len(batch.calls):
            return
        if batch.calls[batch.index].call_id != msg.call_id:
            return
        future = msg.outcome
        if msg.timed_out or future is None:
            if batch.context is not None:
                batch.context.cancelled.set()
            self._finish_call(
                msg.session_id, batch, ok=False, error=f"Timed out after {self.timeout:g}s"
            )
            return
        try:
            output: ToolOutput = future.result()
        except ToolError as exc:
            self._finish_call(msg.session_id, batch, ok=False, error=str(exc), title=exc.card_title)
            return
        except Exception as exc:
            logger.warning("tool %s raised: %r", batch.calls[batch.index].call.name, exc)
            self._finish_call(msg.session_id, batch, ok=False, error=f"Tool crashed: {exc!r}")
            return
        self._finish_call(msg.session_id, batch, ok=True, output=output)

    def _finish_call(
        self,
        session_id: str,
        batch: Batch,
        *,
        ok: bool,
        output: ToolOutput | None = None,
        error: str | None = None,
        title: str | None = None,
    ) -> None:
        with _settled(batch) as unreleased:
            self._finish_frames(session_id, batch, ok, output, error, unreleased, title)
        batch.index += 1
        batch.context = None
        batch.held = None
        if batch.timer is not None:
            batch.timer.cancel()
            batch.timer = None
        self._start_next(session_id)

    def _finish_frames(
        self,
        session_id: str,
        batch: Batch,
        ok: bool,
        output: ToolOutput | None,
        error: str | None,
        unreleased: dict[str, Any] | None,
        title: str | None = None,
    ) -> None:
        request = batch.calls[batch.index]
        name = request.call.name
        if ok and output is not None:
            # A tool that ran without asking after all: its card still shows it ran.
            updates = [] if unreleased is None else [unreleased]
            updates += [
                frames.tool_result(
                    request.call_id,
                    name,
                    ok=True,
                    content=output.content,
                    raw_output=output.raw_output,
                )
            ]
            if output.plan is not None:
                updates.append(frames.plan(output.plan))
            self._frames(session_id, *updates)
            batch.results.append(ToolCallResult(request.call_id, name, True, output.llm_output))
        else:
            text = error or "failed"
            failed = frames.tool_result(
                request.call_id,
                name,
                ok=False,
                content=[frames.text_content(text)],
                raw_output={"error": text},
            )
            if title is not None:
                failed["title"] = title
            self._frames(session_id, failed)
            batch.results.append(ToolCallResult(request.call_id, name, False, text))

    def on_cancel(self, msg: CancelTools) -> None:
        previous = self.state.cancelled_through.get(msg.session_id, 0)
        self.state.cancelled_through[msg.session_id] = max(previous, msg.attempt)
        batch = self.state.batches.get(msg.session_id)
        if batch is None or batch.attempt > msg.attempt:
            return
        del self.state.batches[msg.session_id]
        if batch.timer is not None:
            batch.timer.cancel()
        if batch.context is not None:
            batch.context.cancelled.set()
        with _settled(batch) as unreleased:
            self._cancel_frames(msg.session_id, batch, waiting=unreleased is not None)

    def _cancel_frames(self, session_id: str, batch: Batch, *, waiting: bool) -> None:
        updates: list[dict[str, Any]] = []
        results = list(batch.results)
        for position in range(batch.index, len(batch.calls)):
            request = batch.calls[position]
            started = position == batch.index and batch.context is not None
            if started or request.prepared:
                text = (
                    CANCELLED_WHILE_WAITING
                    if started and waiting
                    else "Cancelled while running"
                    if started
                    else "Cancelled before it started"
                )
                updates.append(
                    frames.tool_result(
                        request.call_id,
                        request.call.name,
                        ok=False,
                        content=[frames.text_content(text)],
                        raw_output={"error": text},
                    )
                )
            results.append(_cancelled(request))
        self._frames(session_id, *updates)
        self._report(session_id, batch.attempt, results, cancelled=True)

    def on_session_closed(self, msg: SessionClosed) -> None:
        self.state.cancelled_through.pop(msg.session_id, None)
        self.state.always_allowed.forget(msg.session_id)

    def _report(
        self, session_id: str, attempt: int, results: list[ToolCallResult], *, cancelled: bool
    ) -> None:
        self.directory.tell(
            SUPERVISOR, CallsExecuted(session_id, attempt, tuple(results), cancelled=cancelled)
        )

    def on_stop(self) -> None:
        pool = self.state.pool
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def _await_stored(stored: Future[str | None] | None, tool_name: str, timeout: float | None) -> None:
    """Return once the call's start is stored; raise ``ToolError`` (it does not run) if it
    could not be."""
    if stored is None:
        return
    try:
        unstored = stored.result(timeout)
    except TimeoutError:
        unstored = f"the session store took no write for {timeout or 0:g} s"
    if unstored is not None:
        raise ToolError(f"{tool_name} was not run: its start could not be saved ({unstored})")


def _run_once_stored(
    tool: Tool, args: Mapping[str, Any], ctx: ToolContext, stored: Future[str | None] | None
) -> ToolOutput:
    """On a tool worker: the call runs once its start is stored (see ``_await_stored``)."""
    _await_stored(stored, tool.name, ctx.timeout)
    return tool.run(args, ctx)


def _granted(_permission: PermissionRequest) -> PermissionOutcome:
    """The answer for a call the session's mode lets run without asking."""
    return "allow_once"


def _asks_first(tool: Tool, args: Mapping[str, Any]) -> bool:
    try:
        return bool(tool.needs_permission(args))
    except Exception as exc:  # then the tool decides as it runs; its card shows it running
        logger.warning("asking %s whether it needs permission failed: %r", tool.name, exc)
        return False


@contextlib.contextmanager
def _settled(batch: Batch) -> Iterator[dict[str, Any] | None]:
    if batch.held is None:
        yield None
        return
    with batch.held.settled() as unreleased:
        yield unreleased


def _cancelled(request: ToolCallRequest) -> ToolCallResult:
    return ToolCallResult(request.call_id, request.call.name, False, "Cancelled by the user", True)
