"""Messages between the runtime's role actors.

Every message that concerns an attempt carries ``(session_id, attempt)``: the
attempt number is a per-session generation counter, so a late message from an
abandoned attempt is recognised and dropped by whoever receives it.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal

from toolprep.messages.content import (
    Content,
    FinishReason,
    FunctionCall,
    GenerateContentResponse,
    Part,
    Usage,
)
from toolprep.messages.frames import DiscardReason
from toolprep.messages.permissions import PermissionRequest
from toolprep.messages.requests import ModelRequest, StreamError, ToolDeclaration
from toolprep.messages.sinks import SessionSink

StopReason = Literal["end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"]
EndReason = DiscardReason
"""Why an attempt was abandoned; its cards not yet running are discarded for that reason."""


TurnFailure = Literal["model_request", "prompt_too_large", "turn_running"]
"""Why a turn ended without a stop reason, when the agent itself is not at fault:
``model_request``, the provider failed the request and no retry or fallback was left;
``prompt_too_large``, the prompt did not fit the model's context window, so it was
refused and left out of the history (the session goes on as before it);
``turn_running``, the session was still running another turn (one at a time), so the
prompt was refused and left out."""


@dataclass(frozen=True, slots=True)
class TurnResult:
    """What a ``session/prompt`` resolves to: a stop reason, or an error message.

    ``failure`` says the error was the model request's, so the editor is not told
    the agent broke (an internal error) when a provider refused or failed."""

    stop_reason: StopReason | None
    error: str | None = None
    usage: Usage | None = None
    failure: TurnFailure | None = None


@dataclass(frozen=True, slots=True)
class UserMessage:
    """A prompt as the client sent it: ACP content blocks under one message id.

    The model gets the prompt as parts; this is what the session records, as
    ``user_message_chunk`` frames, once the turn it starts is accepted, so a
    replay shows each question before its answer.
    """

    message_id: str
    blocks: tuple[dict[str, Any], ...]
    trace_context: dict[str, str] = field(default_factory=dict)
    """The caller's W3C trace context (``traceparent``, ``tracestate``) from the prompt's
    ``_meta``, under which the turn's trace hangs; empty when it sent none."""


# --- supervisor inputs -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StartTurn:
    session_id: str
    prompt: tuple[Part, ...]
    reply: Future[TurnResult]
    user_message: UserMessage | None = None


@dataclass(frozen=True, slots=True)
class CancelTurn:
    """End the session's running turn. ``reason``, when given, is said in the session (a
    thought note, kept and replayed) before its cards are discarded: a turn the user did
    not cancel tells whoever looks later why it stopped."""

    session_id: str
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class RetryAttempt:
    session_id: str
    attempt: int
    delay: float
    error: str


@dataclass(frozen=True, slots=True)
class SwitchModel:
    session_id: str
    attempt: int
    model: str
    error: str


@dataclass(frozen=True, slots=True)
class BackoffElapsed:
    session_id: str
    attempt: int


@dataclass(frozen=True, slots=True)
class StreamFailed:
    session_id: str
    attempt: int
    error: StreamError


@dataclass(frozen=True, slots=True)
class HistorySummarised:
    """Sent by the reader: the summary a ``SummariseHistory`` asked for."""

    session_id: str
    attempt: int
    summary: str


@dataclass(frozen=True, slots=True)
class SummaryFailed:
    """Sent by the reader: the summary request failed or came back empty."""

    session_id: str
    attempt: int
    error: str


@dataclass(frozen=True, slots=True)
class StreamCompleted:
    """Sent by the reader after the provider stream ended normally."""

    session_id: str
    attempt: int


@dataclass(frozen=True, slots=True)
class AttemptSucceeded:
    """Sent by the tracker: the attempt ended normally; these calls await release."""

    session_id: str
    attempt: int
    content: Content
    finish_reason: FinishReason | None
    usage: Usage | None
    calls: tuple[ToolCallRequest, ...]


@dataclass(frozen=True, slots=True)
class AttemptEnded:
    """Sent by the tracker once every remaining card of the attempt was discarded."""

    session_id: str
    attempt: int
    reason: EndReason
    discarded: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ActorCrashed:
    role: str
    error: str
    session_id: str | None


@dataclass(frozen=True, slots=True)
class CallsExecuted:
    session_id: str
    attempt: int
    results: tuple[ToolCallResult, ...]
    cancelled: bool = False


@dataclass(frozen=True, slots=True)
class OpenSession:
    session_id: str
    cwd: str
    history: tuple[Content, ...] = ()
    """What the model saw in an earlier life of the session (restored from a store)."""
    tools: tuple[ToolDeclaration, ...] = ()
    """Tools of this session only (its MCP servers'), offered after the runtime's own."""
    route: int = 0
    """The model route its turns start with (an index into the runtime's routes)."""


@dataclass(frozen=True, slots=True)
class RememberShownCalls:
    """The tool-call ids a session showed its editor in an earlier life (read from the store
    when it is opened again): no new card may take one, or the editor would update the old
    card in its place."""

    session_id: str
    call_ids: frozenset[str]


@dataclass(frozen=True, slots=True)
class ChooseModel:
    """Start the session's next turns with route ``route``; the others stay its fallbacks."""

    session_id: str
    route: int


@dataclass(frozen=True, slots=True)
class CloseSession:
    """End the session: its running turn is cancelled, then every role forgets it.

    ``closed`` resolves once that is done (see ``DetachSink``): only then may
    the same id be opened again, or the old session's late clean-up would land
    on the new one.
    """

    session_id: str
    closed: Future[None] = field(default_factory=Future)


@dataclass(frozen=True, slots=True)
class SessionClosed:
    """Sent by the supervisor once a session is gone: drop whatever is kept for it."""

    session_id: str


# --- reader inputs -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OpenStream:
    session_id: str
    attempt: int
    route: int
    request: ModelRequest


@dataclass(frozen=True, slots=True)
class CloseStream:
    session_id: str
    attempt: int


@dataclass(frozen=True, slots=True)
class SummariseHistory:
    """Ask the model for a summary of older history; its text is never shown as a reply.

    Runs under the attempt number it is given, so ``CloseStream`` cancels it like a stream.
    """

    session_id: str
    attempt: int
    route: int
    request: ModelRequest


# --- tracker inputs ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BeginAttempt:
    session_id: str
    attempt: int


@dataclass(frozen=True, slots=True)
class AttemptChunks:
    """One attempt's chunks of one loop iteration, in order (a part of ``ChunksReceived``)."""

    session_id: str
    attempt: int
    chunks: tuple[GenerateContentResponse, ...]
    received_at: float = 0.0
    """When the first of them was read (``time.monotonic()``): where a card's wait starts."""
    weight: int = 0
    """What they took of the session's read credit (``actors.read_credit``)."""


@dataclass(frozen=True, slots=True)
class ChunksReceived:
    """Every chunk one loop iteration read, by attempt, in the order read: one or more parts.

    Under load one iteration reads from many sessions' streams; one hop for all
    of them, not one per session, is what keeps the hand-off's cost per event
    falling as sessions are added. One session's chunks are a batch of one.
    """

    batches: tuple[AttemptChunks, ...]


@dataclass(frozen=True, slots=True)
class EndAttempt:
    """Abandon an attempt: discard every card not yet handed to execution."""

    session_id: str
    attempt: int
    reason: EndReason
    next_model: str | None = None
    """The model a fallback goes on with (named in the discarded cards' titles)."""


@dataclass(frozen=True, slots=True)
class CallsReleased:
    """The supervisor handed this attempt's calls to the executor; stop tracking them."""

    session_id: str
    attempt: int


# --- executor inputs ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """A complete call, with its id already normalised for the session."""

    call_id: str
    call: FunctionCall
    prepared: bool


@dataclass(frozen=True, slots=True)
class ToolCallResult:
    call_id: str
    name: str
    ok: bool
    llm_output: str
    cancelled: bool = False


@dataclass(frozen=True, slots=True)
class ExecuteCalls:
    session_id: str
    attempt: int
    cwd: str
    calls: tuple[ToolCallRequest, ...]


@dataclass(frozen=True, slots=True)
class CancelTools:
    session_id: str
    attempt: int


@dataclass(frozen=True, slots=True)
class WorkerReturned:
    """Internal to the executor: a worker finished (or the call timed out)."""

    session_id: str
    attempt: int
    call_id: str
    outcome: Future[Any] | None  # None when the call timed out
    timed_out: bool = False


# --- emitter inputs ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionFrames:
    """A session's ACP ``session/update`` payloads, written in order (a part of ``WriteFrames``).

    ``stored``, if given, is resolved once the frames are in the session's log
    (None) or could not be (why not): a tool with effects waits for its start
    to be stored before it runs.
    """

    session_id: str
    updates: tuple[dict[str, Any], ...]
    stored: Future[str | None] | None = None
    read: int = 0
    """The read credit the chunks these frames were made of took: the emitter gives it back
    once they are written (``actors.read_credit``)."""


@dataclass(frozen=True, slots=True)
class WriteFrames:
    """Frames of one or more sessions from one step of a role, written by the emitter in
    this order (one hop for a step that produced frames for many sessions)."""

    writes: tuple[SessionFrames, ...]

    @classmethod
    def of(
        cls,
        session_id: str,
        updates: tuple[dict[str, Any], ...],
        stored: Future[str | None] | None = None,
    ) -> WriteFrames:
        """One session's frames: a batch of one."""
        return cls((SessionFrames(session_id, updates, stored),))


@dataclass(frozen=True, slots=True)
class DeliverTurnResult:
    session_id: str
    result: TurnResult
    reply: Future[TurnResult]
    history: tuple[Content, ...] = ()
    """The session's history as the turn left it (what a journal keeps)."""
    rewritten: bool = False
    """The turn compacted the history: its start was replaced, so it is kept whole."""


@dataclass(frozen=True, slots=True)
class AskPermission:
    session_id: str
    request: PermissionRequest
    tool_call: dict[str, Any]
    reply: Future[str] = field(default_factory=Future)


@dataclass(frozen=True, slots=True)
class AttachSink:
    session_id: str
    sink: SessionSink


@dataclass(frozen=True, slots=True)
class DetachSink:
    """The session is gone: write nothing more for it, then resolve ``closed``.

    Sent by the supervisor after the session's last frames and turn result, and
    after it told the other roles ``SessionClosed``, so by the time ``closed``
    resolves every frame of the session was written and any message a new
    session of the same id sends queues behind the old one's clean-up.
    """

    session_id: str
    closed: Future[None] = field(default_factory=Future)


# --- fault injection (real crash of a role, used by the fault suite) ----------


@dataclass(frozen=True, slots=True)
class CrashRole:
    """Makes the receiving role raise inside its handler, as a bug would."""

    reason: str = "injected fault"
    session_id: str | None = None
