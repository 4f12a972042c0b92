"""A ``TurnObserver`` that draws OpenTelemetry spans and instruments (the ``telemetry`` extra).

The span tree of a prompt turn, named after the GenAI semantic conventions:

- ``invoke_agent toolprep``: the turn, from the prompt taken in to its answer; a child of
  the caller's span when the prompt's ``_meta`` carried a W3C ``traceparent``;
- ``chat {model}``: one per model request (``gen_ai.request.model``, its retry number and
  whether it is a fallback, how it ended, the tokens it used, a ``first_chunk`` event);
- ``execute_tool {tool}``: one per tool card, from the chunk that named the tool to the
  card's terminal update, with an event for each step of the card's life
  (``card.preparing_shown``, ``card.arguments_complete``, ``permission.asked``,
  ``permission.answered``, ``card.running``, ``card.discarded`` with its reason);
- ``compaction``: the history summarised to fit the window.

Only names, numbers and fixed words are recorded: no prompt, no argument, no output, no
path. The instruments are ``instruments.TURN_INSTRUMENTS``; their labels are model and
tool names and fixed words, never a session id.

Thread-safe (one lock over the per-session state); every method catches what the SDK
might raise, since it runs inside a role's handler.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ParamSpec

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.metrics import Histogram, Meter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from toolprep.messages.content import Usage
from toolprep.runtime.kernel.observer import (
    AttemptOutcome,
    CompactionOutcome,
    LoopName,
    TurnEnd,
    TurnObserver,
)
from toolprep.runtime.telemetry.card_frames import CardStep, card_step
from toolprep.runtime.telemetry.instruments import (
    ARGUMENT_STREAMING,
    ATTEMPTS,
    CARDS_DISCARDED,
    COMPACTIONS,
    EVENT_LOOP_LAG,
    FIRST_CHUNK,
    PERMISSION_REQUESTS,
    PREPARING_LATENCY,
    STORE_WRITE_DURATION,
    TOKEN_USAGE,
    TOOL_CALL_DURATION,
    TOOL_CALLS,
    TURNS,
    InstrumentSpec,
)
from toolprep.runtime.telemetry.tallies import Tallies

__all__ = ["OtelObserver"]

logger = logging.getLogger(__name__)

AGENT_NAME = "toolprep"
_PROPAGATOR = TraceContextTextMapPropagator()
_P = ParamSpec("_P")


def _never_raises(method: Callable[_P, None]) -> Callable[_P, None]:
    """Telemetry must not break a turn: a failure is logged and the role goes on."""

    @functools.wraps(method)
    def guarded(*args: _P.args, **kwargs: _P.kwargs) -> None:
        try:
            method(*args, **kwargs)
        except Exception:
            logger.exception("telemetry: recording %s failed", method.__name__)

    return guarded


def _epoch_ns(monotonic: float) -> int:
    """A ``time.monotonic()`` reading of the past as the wall-clock time a span needs."""
    return time.time_ns() - int((time.monotonic() - monotonic) * 1e9)


@dataclass(slots=True)
class _Card:
    span: Span
    tool_name: str
    named_at: float | None
    shown_at: float | None = None
    running_at: float | None = None
    arguments_seen: bool = False


@dataclass(slots=True)
class _TurnTrace:
    span: Span
    context: Context
    attempts: dict[int, tuple[Span, str, float]] = field(default_factory=dict)
    cards: dict[str, _Card] = field(default_factory=dict)
    attempt: int = 0
    compaction: Span | None = None


class OtelObserver(TurnObserver):
    """Spans from ``tracer`` (None: metrics only) and instruments from ``meter`` (None:
    traces only). ``count_turns``: this runtime answers its prompts itself (``acp``), so
    it counts ``toolprep.turns``; in the daemon the session pool counts them."""

    def __init__(
        self, tracer: Tracer | None, meter: Meter | None, *, count_turns: bool = False
    ) -> None:
        self._tracer = tracer
        self._lock = threading.Lock()
        self._turns: dict[str, _TurnTrace] = {}
        self._count_turns = count_turns and meter is not None
        self._tallies: dict[str, Tallies] = {}
        self._histograms: dict[str, Histogram] = {}
        if meter is not None:
            counted = [ATTEMPTS, CARDS_DISCARDED, TOOL_CALLS, COMPACTIONS, PERMISSION_REQUESTS]
            if self._count_turns:
                counted.append(TURNS)
            for spec in counted:  # counted here, read by the SDK only when it collects
                tallies = self._tallies[spec.name] = Tallies()
                meter.create_observable_counter(
                    spec.name, [tallies.observations], spec.unit, spec.description
                )
            for spec in (
                TOOL_CALL_DURATION,
                PREPARING_LATENCY,
                ARGUMENT_STREAMING,
                FIRST_CHUNK,
                TOKEN_USAGE,
                STORE_WRITE_DURATION,
                EVENT_LOOP_LAG,
            ):
                self._histograms[spec.name] = meter.create_histogram(
                    spec.name,
                    spec.unit,
                    spec.description,
                    explicit_bucket_boundaries_advisory=spec.buckets,
                )

    # --- instruments -----------------------------------------------------------------

    def _add(self, spec: InstrumentSpec, *attributes: tuple[str, str]) -> None:
        tallies = self._tallies.get(spec.name)
        if tallies is not None:
            tallies.add(attributes)

    def _record(self, spec: InstrumentSpec, value: float, attributes: Mapping[str, str]) -> None:
        histogram = self._histograms.get(spec.name)
        if histogram is not None:
            histogram.record(value, attributes)

    def _start(self, name: str, kind: SpanKind, context: Context | None, **kw: Any) -> Span:
        tracer = self._tracer
        if tracer is None:
            return trace.INVALID_SPAN
        return tracer.start_span(name, context=context, kind=kind, **kw)

    def _start_under(self, turn: _TurnTrace, name: str, kind: SpanKind, **kw: Any) -> Span:
        """A child of the turn's span; none at all (no sampler call, no span) for a turn the
        sampler left out, whose children it would leave out too."""
        if not turn.span.is_recording():
            return trace.INVALID_SPAN
        return self._start(name, kind, turn.context, **kw)

    # --- turns and attempts ----------------------------------------------------------

    @_never_raises
    def turn_started(self, session_id: str, trace_context: Mapping[str, str]) -> None:
        parent = _PROPAGATOR.extract(dict(trace_context)) if trace_context else None
        span = self._start(
            f"invoke_agent {AGENT_NAME}",
            SpanKind.INTERNAL,
            parent,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": AGENT_NAME,
                "gen_ai.conversation.id": session_id,
            },
        )
        with self._lock:
            previous = self._turns.pop(session_id, None)
            self._turns[session_id] = _TurnTrace(span, trace.set_span_in_context(span))
        if previous is not None:
            _end_turn_trace(previous, "superseded")

    @_never_raises
    def turn_ended(self, session_id: str, end: TurnEnd) -> None:
        with self._lock:
            turn = self._turns.pop(session_id, None)
        if self._count_turns:
            self._add(TURNS, ("stop_reason", end))
        if turn is not None:
            _end_turn_trace(turn, end)

    @_never_raises
    def attempt_started(
        self, session_id: str, attempt: int, model: str, *, retry: int, fallback: bool
    ) -> None:
        with self._lock:
            turn = self._turns.get(session_id)
            if turn is None:
                return
            span = self._start_under(
                turn,
                f"chat {model}",
                SpanKind.CLIENT,
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": model,
                    "toolprep.attempt.number": attempt,
                    "toolprep.attempt.retry": retry,
                    "toolprep.attempt.fallback": fallback,
                },
            )
            turn.attempts[attempt] = (span, model, time.monotonic())
            turn.attempt = attempt

    @_never_raises
    def first_chunk(self, session_id: str, attempt: int, received_at: float) -> None:
        with self._lock:
            turn = self._turns.get(session_id)
            started = turn.attempts.get(attempt) if turn is not None else None
        if started is None:
            return
        span, model, started_at = started
        span.add_event("first_chunk", timestamp=_epoch_ns(received_at))
        self._record(FIRST_CHUNK, received_at - started_at, {"gen_ai.request.model": model})

    @_never_raises
    def attempt_ended(
        self, session_id: str, attempt: int, outcome: AttemptOutcome, usage: Usage | None
    ) -> None:
        with self._lock:
            turn = self._turns.get(session_id)
            started = turn.attempts.pop(attempt, None) if turn is not None else None
        if started is None:
            return
        span, model, _ = started
        self._add(ATTEMPTS, ("gen_ai.request.model", model), ("toolprep.attempt.outcome", outcome))
        span.set_attribute("toolprep.attempt.outcome", outcome)
        if usage is not None:
            span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
            for kind, tokens in (("input", usage.input_tokens), ("output", usage.output_tokens)):
                self._record(
                    TOKEN_USAGE,
                    tokens,
                    {
                        "gen_ai.operation.name": "chat",
                        "gen_ai.request.model": model,
                        "gen_ai.token.type": kind,
                    },
                )
        if outcome in ("stream_error", "crash"):
            span.set_status(Status(StatusCode.ERROR, outcome))
        span.end()

    # --- cards -------------------------------------------------------------------------

    @_never_raises
    def tool_named(self, session_id: str, call_id: str, tool_name: str, received_at: float) -> None:
        with self._lock:
            turn = self._turns.get(session_id)
            if turn is None or call_id in turn.cards:
                return
            turn.cards[call_id] = self._open_card(turn, call_id, tool_name, received_at)

    def _open_card(
        self, turn: _TurnTrace, call_id: str, tool_name: str, named_at: float | None
    ) -> _Card:
        start = _epoch_ns(named_at) if named_at is not None else None
        span = self._start_under(
            turn,
            f"execute_tool {tool_name}",
            SpanKind.INTERNAL,
            start_time=start,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool_name,
                "gen_ai.tool.call.id": call_id,
                "toolprep.attempt.number": turn.attempt,
            },
        )
        return _Card(span, tool_name, named_at)

    @_never_raises
    def frames_written(self, session_id: str, updates: Sequence[dict[str, Any]]) -> None:
        steps = [step for update in updates if (step := card_step(update)) is not None]
        if not steps:
            return
        now = time.monotonic()
        with self._lock:
            turn = self._turns.get(session_id)
            if turn is None:
                return
            ended: list[tuple[CardStep, _Card]] = []
            for step in steps:
                card = turn.cards.get(step.call_id)
                if card is None:
                    card = self._open_card(turn, step.call_id, step.tool_name or "unnamed", None)
                    turn.cards[step.call_id] = card
                if step.kind in ("completed", "failed", "discarded"):
                    del turn.cards[step.call_id]
                    ended.append((step, card))
                else:
                    self._card_moved(card, step, now)
        for step, card in ended:
            self._card_ended(card, step, now)

    def _card_moved(self, card: _Card, step: CardStep, now: float) -> None:
        tool = {"gen_ai.tool.name": card.tool_name}
        match step.kind:
            case "preparing":
                card.shown_at = now
                card.span.add_event("card.preparing_shown")
                if card.named_at is not None:
                    self._record(PREPARING_LATENCY, now - card.named_at, tool)
            case "arguments":
                _arguments_complete(card)
            case "running":
                _arguments_complete(card)
                card.running_at = now
                card.span.add_event("card.running")
                if card.shown_at is not None:
                    self._record(ARGUMENT_STREAMING, now - card.shown_at, tool)
            case _:
                pass

    def _card_ended(self, card: _Card, step: CardStep, now: float) -> None:
        outcome = step.kind
        span = card.span
        if outcome == "discarded":
            reason = step.discard_reason
            span.add_event("card.discarded", {"toolprep.discard_reason": reason})
            span.set_attribute("toolprep.discard_reason", reason)
            self._add(CARDS_DISCARDED, ("toolprep.discard_reason", reason))
        labels = (("gen_ai.tool.name", card.tool_name), ("toolprep.tool.outcome", outcome))
        self._add(TOOL_CALLS, *labels)
        if card.running_at is not None:
            self._record(TOOL_CALL_DURATION, now - card.running_at, dict(labels))
        span.set_attribute("toolprep.tool.outcome", outcome)
        if outcome == "failed":
            span.set_status(Status(StatusCode.ERROR, "the tool failed"))
        span.end()

    @_never_raises
    def permission_asked(self, session_id: str, call_id: str) -> None:
        card = self._card(session_id, call_id)
        if card is not None:
            _arguments_complete(card)  # the request shows the complete call
            card.span.add_event("permission.asked")

    @_never_raises
    def permission_answered(self, session_id: str, call_id: str, outcome: str) -> None:
        self._add(PERMISSION_REQUESTS, ("toolprep.permission.outcome", outcome))
        card = self._card(session_id, call_id)
        if card is not None:
            card.span.add_event("permission.answered", {"toolprep.permission.outcome": outcome})

    def _card(self, session_id: str, call_id: str) -> _Card | None:
        with self._lock:
            turn = self._turns.get(session_id)
            return turn.cards.get(call_id) if turn is not None else None

    # --- compaction and the store ----------------------------------------------------------

    @_never_raises
    def compaction_started(self, session_id: str) -> None:
        with self._lock:
            turn = self._turns.get(session_id)
            if turn is None:
                return
            turn.compaction = self._start_under(turn, "compaction", SpanKind.INTERNAL)

    @_never_raises
    def compaction_ended(self, session_id: str, outcome: CompactionOutcome) -> None:
        self._add(COMPACTIONS, ("toolprep.compaction.outcome", outcome))
        with self._lock:
            turn = self._turns.get(session_id)
            span = turn.compaction if turn is not None else None
            if turn is not None:
                turn.compaction = None
        if span is not None:
            span.set_attribute("toolprep.compaction.outcome", outcome)
            if outcome == "failed":
                span.set_status(Status(StatusCode.ERROR, "compaction failed"))
            span.end()

    @_never_raises
    def store_written(self, seconds: float, ok: bool) -> None:
        result = "ok" if ok else "failed"
        self._record(STORE_WRITE_DURATION, seconds, {"toolprep.store.result": result})
        if not ok:  # a span of its own: a write serves many sessions' turns at once
            self._failure("store.write", "the session store refused a write", {})

    @_never_raises
    def event_loop_lag(self, loop: LoopName, seconds: float) -> None:
        self._record(EVENT_LOOP_LAG, seconds, {"toolprep.loop": loop})

    @_never_raises
    def worker_ended(self, slot: int, how: str, sessions: int) -> None:
        attributes: dict[str, str | int] = {
            "toolprep.worker.slot": slot,
            "toolprep.worker.exit": how,
            "toolprep.worker.sessions": sessions,
        }
        self._failure("worker.restart", "a worker ended unasked", attributes)

    def _failure(self, name: str, message: str, attributes: dict[str, str | int]) -> None:
        """A span of its own, outside any turn, for something that went wrong."""
        span = self._start(name, SpanKind.INTERNAL, None, attributes=attributes)
        span.set_status(Status(StatusCode.ERROR, message))
        span.end()


def _arguments_complete(card: _Card) -> None:
    """The call's complete arguments were shown (once: a permission request, a pending
    update or the start, whichever came first)."""
    if not card.arguments_seen:
        card.arguments_seen = True
        card.span.add_event("card.arguments_complete")


def _end_turn_trace(turn: _TurnTrace, end: str) -> None:
    """End the turn's span, and any child left open (a card or attempt its end never
    reached, as when a process stops mid-turn) as ``unfinished``."""
    for span, _, _ in turn.attempts.values():
        span.set_attribute("toolprep.attempt.outcome", "unfinished")
        span.end()
    for card in turn.cards.values():
        card.span.set_attribute("toolprep.tool.outcome", "unfinished")
        card.span.end()
    if turn.compaction is not None:
        turn.compaction.end()
    turn.span.set_attribute("toolprep.turn.stop_reason", end)
    if end == "error":
        turn.span.set_status(Status(StatusCode.ERROR, "the prompt failed"))
    turn.span.end()
