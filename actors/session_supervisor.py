"""SessionSupervisor: the turn loop of every session, and every way an attempt ends.

A turn is a loop: request -> attempt -> tools -> next request, until the
model answers without calling a tool. Each attempt is a numbered generation;
whatever ends it early (a retry, a model fallback, a user cancel, a stream
error, a crashed role) goes through the same door: ``EndAttempt`` to the
tracker, which discards the attempt's cards and answers ``AttemptEnded``, and
only then does the supervisor act (back off, fall back, or finish the turn).
That ordering is what makes "every card is terminal before the prompt
result is written" hold for every stop reason.

Before a request, a history whose last request filled the model's context
window past ``TurnConfig.compaction.at`` is compacted first (phase
``compacting``, ``history_compaction``): if that fails, the request goes out
with the history as it was. No card exists during compaction, so a cancel
ends the turn at once. A request the provider refuses as too large for the
window (``compaction.context_overflow``) is compacted and sent again, once
per turn; refused again, the turn fails with the provider's reason.

A prompt must never brick its session: one certainly too big for the window on
its own (``compaction.oversized_prompt``) is refused before it is recorded or
sent, and a turn that ends refused as too large leaves the history as it was
before its prompt (failure ``prompt_too_large``), so the next prompt works.

What it keeps per session and turn is in ``supervisor_state``; how a turn and a
closing session end, in ``turn_endings``.
"""

from __future__ import annotations

import logging
import time
from typing import assert_never

from toolprep.actors.base import EMITTER, EXECUTOR, READER, SUPERVISOR, TRACKER, Handlers, RoleActor
from toolprep.actors.directory import RoleDirectory
from toolprep.actors.history_compaction import HistoryCompaction
from toolprep.actors.supervisor_state import (
    AfterAttempt,
    Phase,
    SessionState,
    SupervisorState,
    Turn,
    TurnConfig,
)
from toolprep.actors.turn_endings import finish_turn, forget_session
from toolprep.messages.content import (
    Content,
    FinishReason,
    FunctionResponse,
    FunctionResponsePart,
    Part,
)
from toolprep.messages.frames import (
    agent_thought_chunk,
    session_info_update,
    usage_update,
    user_message_chunk,
)
from toolprep.messages.turns import (
    ActorCrashed,
    AttemptEnded,
    AttemptSucceeded,
    BackoffElapsed,
    BeginAttempt,
    CallsExecuted,
    CallsReleased,
    CancelTools,
    CancelTurn,
    ChooseModel,
    CloseSession,
    CloseStream,
    DetachSink,
    EndAttempt,
    EndReason,
    ExecuteCalls,
    HistorySummarised,
    OpenSession,
    OpenStream,
    RetryAttempt,
    StartTurn,
    StopReason,
    StreamFailed,
    SummaryFailed,
    SwitchModel,
    ToolCallResult,
    TurnFailure,
    TurnResult,
    WriteFrames,
)
from toolprep.runtime.kernel.compaction import (
    context_overflow,
    oversized_prompt,
    prompt_too_large_message,
)
from toolprep.runtime.kernel.scheduler import Scheduler
from toolprep.runtime.kernel.session_title import title_of
from toolprep.runtime.providers.base import ModelRequest, StreamError, ToolDeclaration
from toolprep.runtime.providers.routes import ModelRoute

__all__ = ["SessionSupervisor"]

logger = logging.getLogger(__name__)


class SessionSupervisor(RoleActor):
    role = SUPERVISOR

    def __init__(
        self,
        directory: RoleDirectory,
        state: SupervisorState,
        routes: tuple[ModelRoute, ...],
        tools: tuple[ToolDeclaration, ...],
        scheduler: Scheduler,
        config: TurnConfig,
    ) -> None:
        super().__init__(directory)
        self.state = state
        self.routes = routes
        self.tools = tools
        self.scheduler = scheduler
        self.config = config
        self.compaction = HistoryCompaction(directory, state, config.compaction, config.max_tokens)

    def handlers(self) -> Handlers:
        return {
            OpenSession: self.on_open_session,
            CloseSession: self.on_close_session,
            StartTurn: self.on_start_turn,
            ChooseModel: self.on_choose_model,
            CancelTurn: self.on_cancel,
            StreamFailed: self.on_stream_failed,
            RetryAttempt: self.on_retry,
            SwitchModel: self.on_switch_model,
            AttemptEnded: self.on_attempt_ended,
            BackoffElapsed: self.on_backoff_elapsed,
            AttemptSucceeded: self.on_attempt_succeeded,
            HistorySummarised: self.on_history_summarised,
            SummaryFailed: self.on_summary_failed,
            CallsExecuted: self.on_calls_executed,
            ActorCrashed: self.on_actor_crashed,
        }

    # --- sessions ----------------------------------------------------------------

    def on_open_session(self, msg: OpenSession) -> None:
        self.state.sessions.setdefault(
            msg.session_id,
            SessionState(
                msg.session_id,
                msg.cwd,
                list(msg.history),
                first_route=msg.route,
                tools=msg.tools,
            ),
        )

    def on_choose_model(self, msg: ChooseModel) -> None:
        session = self.state.sessions.get(msg.session_id)
        if session is not None:  # a running turn keeps its order; the next one starts here
            session.first_route = msg.route

    def on_close_session(self, msg: CloseSession) -> None:
        session = self.state.sessions.get(msg.session_id)
        if session is None:
            # Nothing to wind down, but the sink still goes and whoever waits on the close
            # (a reopen of the id) must hear that it is done.
            self.directory.tell(EMITTER, DetachSink(msg.session_id, msg.closed))
            return
        session.closed = msg.closed
        if session.turn is None:
            forget_session(self.directory, self.state, session)
            return
        session.closing = True
        self.on_cancel(CancelTurn(msg.session_id))

    # --- the turn loop -------------------------------------------------------------

    def on_start_turn(self, msg: StartTurn) -> None:
        session = self.state.sessions.get(msg.session_id)
        if session is None:
            msg.reply.set_result(TurnResult(None, error=f"Unknown session: {msg.session_id}"))
            return
        if session.turn is not None:
            refused = "A prompt is already running in this session: wait for its reply or cancel it"
            msg.reply.set_result(TurnResult(None, error=refused, failure="turn_running"))
            return
        window = self.routes[session.first_route].window
        if oversized_prompt(msg.prompt, window):
            # Refused before it goes on record: the session is as if it was never sent.
            error = prompt_too_large_message(msg.prompt, window, None)
            msg.reply.set_result(TurnResult(None, error=error, failure="prompt_too_large"))
            return
        session.turn = Turn(msg.reply, history_mark=len(session.history), prompt=msg.prompt)
        _take_prompt(self.directory, session, msg)
        first = session.first_route
        session.order = (first, *(i for i in range(len(self.routes)) if i != first))
        session.route = 0
        session.retries = 0
        self._start_attempt(session)

    def _route(self, session: SessionState, step: int = 0) -> ModelRoute | None:
        """The route ``step`` places after the current one in this turn's order, if any."""
        position = session.route + step
        return self.routes[session.order[position]] if position < len(session.order) else None

    def _start_attempt(self, session: SessionState) -> None:
        turn = session.turn
        assert turn is not None
        if turn.requests >= self.config.max_requests_per_turn:
            self._finish(session, "max_turn_requests")
            return
        route = self._route(session)
        assert route is not None
        if not self.compaction.begin(session, route):
            self._request(session)

    def on_history_summarised(self, msg: HistorySummarised) -> None:
        session = self._live(msg.session_id, msg.attempt, "compacting")
        if session is not None:
            self.compaction.apply(session, msg.summary)
            self._request(session)

    def on_summary_failed(self, msg: SummaryFailed) -> None:
        session = self._live(msg.session_id, msg.attempt, "compacting")
        if session is not None:
            self._compaction_failed(session, msg.error)

    def _compaction_failed(self, session: SessionState, error: str) -> None:
        self.compaction.failed(session, error)
        self._request(session)

    def _request(self, session: SessionState) -> None:
        """Send the turn's next model request, over the history as it now stands."""
        turn = session.turn
        assert turn is not None
        turn.requests += 1
        # Numbered across the runtime, not per session: a late message of a closed session's
        # attempt must not match an attempt of the session opened again under its id.
        self.state.attempts_started += 1
        session.attempt = self.state.attempts_started
        session.phase = "streaming"
        route = self._route(session)
        assert route is not None
        request = _model_request(self.config, self.tools, session, route.model)
        turn.attempt_usage = None
        self.directory.observer.attempt_started(
            session.session_id,
            session.attempt,
            route.model,
            retry=session.retries,
            fallback=session.route > 0,
        )
        self.directory.tell(TRACKER, BeginAttempt(session.session_id, session.attempt))
        self.directory.tell(
            READER,
            OpenStream(session.session_id, session.attempt, session.order[session.route], request),
        )

    def _live(self, session_id: str, attempt: int, *phases: Phase) -> SessionState | None:
        session = self.state.sessions.get(session_id)
        if session is None or session.turn is None or session.attempt != attempt:
            return None
        if phases and session.phase not in phases:
            return None
        return session

    def _end_attempt(
        self,
        session: SessionState,
        reason: EndReason,
        after: AfterAttempt,
        next_model: str | None = None,
    ) -> None:
        """Close the stream and have the tracker discard the attempt's cards, then do ``after``."""
        assert session.turn is not None
        session.turn.after = after
        if session.phase == "ending":
            return  # already ending; the new plan replaces the old one
        session.phase = "ending"
        self.directory.tell(READER, CloseStream(session.session_id, session.attempt))
        self.directory.tell(
            TRACKER, EndAttempt(session.session_id, session.attempt, reason, next_model)
        )

    def on_stream_failed(self, msg: StreamFailed) -> None:
        session = self._live(msg.session_id, msg.attempt, "streaming")
        if session is None:
            return
        self._after_failure(session, msg.error)

    def _after_failure(self, session: SessionState, error: StreamError) -> None:
        assert session.turn is not None
        session.turn.last_error = error.message
        session.turn.model_failed = error.kind != "crash"
        session.turn.too_large = context_overflow(error)
        if (
            context_overflow(error)
            and not session.turn.overflowed
            and self.config.compaction.at > 0
        ):
            # Compact whatever the last usage said, once per turn; refused again, it fails.
            session.turn.overflowed = True
            self._end_attempt(session, "retry", AfterAttempt("compact"))
            return
        policy = self.config.retry
        me = self.actor_ref
        if error.retryable and session.retries < policy.max_retries:
            wait = policy.wait(session.retries + 1, error.retry_after)
            notice = WriteFrames.of(session.session_id, (wait.notice(error.message),))
            self.directory.tell(EMITTER, notice)  # the user sees why the turn pauses
            me.tell(RetryAttempt(session.session_id, session.attempt, wait.seconds, error.message))
        elif (fallback := self._route(session, 1)) is not None:
            me.tell(SwitchModel(session.session_id, session.attempt, fallback.model, error.message))
        else:
            self._end_attempt(session, "stream_error", AfterAttempt("fail"))

    def on_retry(self, msg: RetryAttempt) -> None:
        session = self._live(msg.session_id, msg.attempt, "streaming", "ending")
        if session is None or session.turn is None or session.turn.cancel_requested:
            return
        session.retries += 1
        self.state.retries += 1
        self.state.delays.append(msg.delay)
        logger.info("retrying %s in %.2fs: %s", msg.session_id, msg.delay, msg.error)
        self._end_attempt(session, "retry", AfterAttempt("retry", msg.delay))

    def on_switch_model(self, msg: SwitchModel) -> None:
        session = self._live(msg.session_id, msg.attempt, "streaming", "ending")
        if session is None or session.turn is None or session.turn.cancel_requested:
            return
        if self._route(session, 1) is None:
            self._end_attempt(session, "stream_error", AfterAttempt("fail"))
            return
        self.state.fallbacks += 1
        logger.info("falling back to %s for %s: %s", msg.model, msg.session_id, msg.error)
        self._end_attempt(session, "model_fallback", AfterAttempt("fallback"), msg.model)

    def on_attempt_ended(self, msg: AttemptEnded) -> None:
        session = self._live(msg.session_id, msg.attempt, "ending")
        if session is None or session.turn is None:
            return
        after = session.turn.after or AfterAttempt("fail")
        session.turn.after = None
        self.directory.observer.attempt_ended(
            msg.session_id, msg.attempt, msg.reason, session.turn.attempt_usage
        )
        match after.step:
            case "retry":
                session.phase = "backoff"
                attempt = session.attempt
                me = self.directory
                self.scheduler.call_later(
                    after.delay,
                    lambda: me.tell(SUPERVISOR, BackoffElapsed(msg.session_id, attempt)),
                )
            case "compact":
                route = self._route(session)
                assert route is not None
                session.used = route.window  # the request did not fit: take it as full
                self._start_attempt(session)
            case "fallback":
                session.route += 1
                session.retries = 0
                self._start_attempt(session)
            case "cancel":
                self._finish(session, "cancelled")
            case "refusal":
                self._finish(session, "refusal")
            case "max_tokens":
                self._finish(session, "max_tokens")
            case "crash":
                error = StreamError("a runtime role crashed", retryable=True, kind="crash")
                session.phase = "streaming"  # the crash decision runs like a failed stream
                self._after_failure(session, error)
            case "fail" if session.turn.too_large:
                route = self._route(session)
                assert route is not None
                refused = self.compaction.drop_prompt(session, route)
                self._finish(session, None, error=refused, failure="prompt_too_large")
            case "fail":
                error_text = session.turn.last_error or "model request failed"
                failure: TurnFailure | None = "model_request" if session.turn.model_failed else None
                self._finish(session, None, error=error_text, failure=failure)
            case _:
                assert_never(after.step)

    def on_backoff_elapsed(self, msg: BackoffElapsed) -> None:
        session = self._live(msg.session_id, msg.attempt, "backoff")
        if session is not None:
            self._start_attempt(session)

    def on_attempt_succeeded(self, msg: AttemptSucceeded) -> None:
        session = self._live(msg.session_id, msg.attempt, "streaming")
        if session is None or session.turn is None:
            return
        turn = session.turn
        turn.attempt_usage = msg.usage
        if msg.usage is not None:
            turn.usage = msg.usage
            session.used = msg.usage.total_tokens
            route = self._route(session)
            assert route is not None
            frame = usage_update(msg.usage.total_tokens, route.window)
            self.directory.tell(EMITTER, WriteFrames.of(session.session_id, (frame,)))
        if msg.finish_reason is FinishReason.MAX_TOKENS and msg.calls:
            # Output was cut at the token limit: even a repaired call is a half-made one,
            # so it never runs; its card is discarded and the turn stops at max_tokens.
            self._end_attempt(session, "max_tokens", AfterAttempt("max_tokens"))
            return
        if msg.finish_reason is FinishReason.REFUSAL:
            # The refused prompt and all that followed leave history (ACP "refusal").
            del session.history[turn.history_mark :]
            self._end_attempt(session, "refusal", AfterAttempt("refusal"))
            return
        if msg.content.parts:
            session.history.append(msg.content)
        self.directory.observer.attempt_ended(
            session.session_id, session.attempt, "succeeded", msg.usage
        )
        self.directory.tell(TRACKER, CallsReleased(session.session_id, session.attempt))
        if msg.calls:
            session.phase = "tools"
            self.directory.tell(
                EXECUTOR, ExecuteCalls(session.session_id, session.attempt, session.cwd, msg.calls)
            )
            return
        stop: StopReason = (
            "max_tokens" if msg.finish_reason is FinishReason.MAX_TOKENS else "end_turn"
        )
        self._finish(session, stop)

    def on_calls_executed(self, msg: CallsExecuted) -> None:
        session = self._live(msg.session_id, msg.attempt, "tools")
        if session is None or session.turn is None:
            return
        responses = _responses(msg.results)
        if responses:
            session.history.append(Content("user", responses))
        if session.turn.cancel_requested:
            self._finish(session, "cancelled")
            return
        if msg.cancelled:  # aborted by a crash recovery, not by the user
            self._finish(session, None, error=session.turn.last_error or "tool execution aborted")
            return
        session.retries = 0
        self._start_attempt(session)

    # --- cancellation and crashes ------------------------------------------------------

    def on_cancel(self, msg: CancelTurn) -> None:
        session = self.state.sessions.get(msg.session_id)
        if session is None or session.turn is None:
            return
        if msg.reason is not None and not session.turn.cancel_requested:
            note = agent_thought_chunk(f"\n[{msg.reason}]\n")
            self.directory.tell(EMITTER, WriteFrames.of(session.session_id, (note,)))
        session.turn.cancel_requested = True
        if session.phase == "compacting":  # no cards yet: the summary is simply dropped
            self.directory.tell(READER, CloseStream(session.session_id, session.attempt))
            self.directory.observer.compaction_ended(session.session_id, "cancelled")
            self._finish(session, "cancelled")
        elif session.phase in ("streaming", "ending"):
            self._end_attempt(session, "cancel", AfterAttempt("cancel"))
        elif session.phase == "backoff":
            self._finish(session, "cancelled")
        elif session.phase == "tools":
            self.directory.tell(EXECUTOR, CancelTools(session.session_id, session.attempt))

    def on_actor_crashed(self, msg: ActorCrashed) -> None:
        logger.error("role %s crashed: %s", msg.role, msg.error)
        if msg.session_id is None:
            return
        session = self.state.sessions.get(msg.session_id)
        if session is None or session.turn is None:
            return
        if session.phase == "compacting":  # the summary may never come: go on without it
            self._compaction_failed(session, f"{msg.role} crashed")
        elif session.phase == "streaming":
            self._end_attempt(session, "crash", AfterAttempt("crash"))
        elif session.phase == "ending":
            # The lost message may have been the EndAttempt itself: ask again (idempotent).
            self.directory.tell(TRACKER, EndAttempt(session.session_id, session.attempt, "crash"))
        elif session.phase == "tools":
            self.directory.tell(EXECUTOR, CancelTools(session.session_id, session.attempt))
            session.turn.last_error = f"{msg.role} crashed during tool execution"

    # --- the end of a turn ------------------------------------------------------------

    def _finish(
        self,
        session: SessionState,
        stop: StopReason | None,
        *,
        error: str | None = None,
        failure: TurnFailure | None = None,
    ) -> None:
        finish_turn(self.directory, self.state, session, stop, error=error, failure=failure)


def _take_prompt(directory: RoleDirectory, session: SessionState, msg: StartTurn) -> None:
    """An accepted prompt goes on record ahead of everything the turn sends (and names an
    untitled session); the observer hears the turn began, under the caller's trace."""
    said = msg.user_message
    directory.observer.turn_started(
        session.session_id, said.trace_context if said is not None else {}
    )
    if said is not None:
        chunks = tuple(user_message_chunk(said.message_id, block) for block in said.blocks)
        directory.tell(EMITTER, WriteFrames.of(session.session_id, chunks))
    untitled = title_of(session.history) is None
    session.history.append(Content("user", msg.prompt))
    if untitled and (title := title_of(session.history)) is not None:
        frame = session_info_update(title, time.time())
        directory.tell(EMITTER, WriteFrames.of(session.session_id, (frame,)))


def _model_request(
    config: TurnConfig, tools: tuple[ToolDeclaration, ...], session: SessionState, model: str
) -> ModelRequest:
    """The next request of the session's turn, over its history as it now stands."""
    return ModelRequest(
        model=model,
        history=tuple(session.history),
        system=config.system_prompt,
        tools=tools + session.tools if session.tools else tools,
        max_tokens=config.max_tokens,
        conversation=session.session_id,
    )


def _responses(results: tuple[ToolCallResult, ...]) -> tuple[Part, ...]:
    """The calls' results as the model reads them, in the order called."""
    return tuple(
        FunctionResponsePart(
            FunctionResponse(
                r.call_id,
                r.name,
                {"output": r.llm_output} if r.ok else {"error": r.llm_output},
                is_error=not r.ok,
            )
        )
        for r in results
    )
