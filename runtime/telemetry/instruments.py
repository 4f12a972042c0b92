"""The daemon's instruments, as a typed facade whose methods do nothing when telemetry is off.

Code that records calls ``Metrics`` methods and never imports OpenTelemetry: with
telemetry off it holds ``NO_METRICS``, whose methods return at once, so a turn pays one
method call and nothing is imported. With the ``telemetry`` extra the same calls reach the
SDK's instruments (``otel_instruments``).

Two kinds of instrument, so that no hot path counts what it can be asked for:

- counted where it happens: ``toolprep.turns`` (``turn_ended``, labelled by stop reason);
- read when a reader collects (a scrape of ``/metrics``, an OTLP export): live sessions,
  attached clients, open connections, bytes waiting in send buffers, worker restarts. Their
  owners register a reading (``observe_*``) that is called only then.

Names and units follow the OpenTelemetry conventions (dotted names, UCUM units with
``{annotations}`` for counts). No session id, path, content or argument is ever a label:
labels are model and tool names and fixed words. ``TURN_INSTRUMENTS`` are recorded by the
runtime's observer (``otel_observer``), the rest by the hosting (``Metrics`` below).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal, Protocol

__all__ = [
    "ARGUMENT_STREAMING",
    "ATTEMPTS",
    "CARDS_DISCARDED",
    "CLIENTS_ATTACHED",
    "COMPACTIONS",
    "CONNECTIONS_OPEN",
    "EVENT_LOOP_LAG",
    "FAST_SECONDS",
    "FIRST_CHUNK",
    "FRAMES_CACHED_BYTES",
    "INSTRUMENTS",
    "NO_METRICS",
    "PERMISSION_REQUESTS",
    "PREPARING_LATENCY",
    "SEND_BUFFER_BYTES",
    "SESSIONS_LIVE",
    "SLOW_SECONDS",
    "STORE_WRITE_DURATION",
    "TOKEN_COUNTS",
    "TOKEN_USAGE",
    "TOOL_CALLS",
    "TOOL_CALL_DURATION",
    "TURNS",
    "TURN_INSTRUMENTS",
    "WORKER_RESTARTS",
    "ConnectionReadings",
    "InstrumentKind",
    "InstrumentSpec",
    "Metrics",
    "SessionReadings",
    "TurnOutcome",
]

TurnOutcome = Literal[
    "end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled", "error"
]
"""A turn's ``stop_reason`` label: ACP's stop reasons, or ``error`` for a prompt that failed."""


InstrumentKind = Literal["counter", "histogram", "observable_counter", "observable_up_down_counter"]


@dataclass(frozen=True, slots=True)
class InstrumentSpec:
    """One instrument's name, kind, unit and meaning, declared once for the SDK and the docs."""

    name: str
    kind: InstrumentKind
    unit: str
    description: str
    buckets: tuple[float, ...] | None = None
    """A histogram's bucket bounds, in its unit: the SDK's default ones (0 to 10 000) suit
    milliseconds, and would put every sub-second latency in one bucket."""


FAST_SECONDS: Final = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)
"""Bounds for work the daemon does itself (a card, a store write): 0.1 ms to 2.5 s."""
SLOW_SECONDS: Final = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    320.0,
)
"""Bounds for waits on a model or a tool: 5 ms to over 5 min."""
TOKEN_COUNTS: Final = tuple(float(4**n) for n in range(13))
"""Bounds for tokens per request: 1 to 16 M by powers of four (the GenAI conventions')."""


TURNS: Final = InstrumentSpec(
    "toolprep.turns", "counter", "{turn}", "Prompt turns answered, by stop reason."
)
SESSIONS_LIVE: Final = InstrumentSpec(
    "toolprep.sessions.live",
    "observable_up_down_counter",
    "{session}",
    "Sessions open in the daemon (attached to or not).",
)
CLIENTS_ATTACHED: Final = InstrumentSpec(
    "toolprep.clients.attached",
    "observable_up_down_counter",
    "{client}",
    "Client connections attached to sessions, counted once per session they attach to.",
)
FRAMES_CACHED_BYTES: Final = InstrumentSpec(
    "toolprep.frames.cached.bytes",
    "observable_up_down_counter",
    "By",
    "Bytes of frames the daemon keeps in memory for replays, over its live sessions.",
)
CONNECTIONS_OPEN: Final = InstrumentSpec(
    "toolprep.connections.open",
    "observable_up_down_counter",
    "{connection}",
    "WebSocket connections open on /acp.",
)
SEND_BUFFER_BYTES: Final = InstrumentSpec(
    "toolprep.send_buffer.bytes",
    "observable_up_down_counter",
    "By",
    "Bytes queued for clients and not yet sent, over all connections.",
)
WORKER_RESTARTS: Final = InstrumentSpec(
    "toolprep.worker.restarts",
    "observable_counter",
    "{restart}",
    "Worker processes started to replace one that ended.",
)
ATTEMPTS: Final = InstrumentSpec(
    "toolprep.attempts",
    "counter",
    "{attempt}",
    "Model requests, by model and how they ended (succeeded, retry, model_fallback, ...).",
)
CARDS_DISCARDED: Final = InstrumentSpec(
    "toolprep.cards.discarded",
    "counter",
    "{card}",
    "Tool cards ended as not run, by discard reason.",
)
TOOL_CALLS: Final = InstrumentSpec(
    "toolprep.tool_calls",
    "counter",
    "{call}",
    "Tool calls whose card ended, by tool and outcome (completed, failed, discarded).",
)
TOOL_CALL_DURATION: Final = InstrumentSpec(
    "toolprep.tool_call.duration",
    "histogram",
    "s",
    "From a call's start (in_progress) to its result, by tool and outcome.",
    SLOW_SECONDS,
)
PREPARING_LATENCY: Final = InstrumentSpec(
    "toolprep.card.preparing.latency",
    "histogram",
    "s",
    "From reading the chunk that names a tool to writing its preparing card.",
    FAST_SECONDS,
)
ARGUMENT_STREAMING: Final = InstrumentSpec(
    "toolprep.card.argument_streaming.duration",
    "histogram",
    "s",
    "From the preparing card to the call's start: the wait the early card covers, by tool.",
    SLOW_SECONDS,
)
FIRST_CHUNK: Final = InstrumentSpec(
    "toolprep.attempt.time_to_first_chunk",
    "histogram",
    "s",
    "From a model request's start to its first chunk, by model.",
    SLOW_SECONDS,
)
TOKEN_USAGE: Final = InstrumentSpec(
    "gen_ai.client.token.usage",
    "histogram",
    "{token}",
    "Tokens per model request, by model and token type (input, output).",
    TOKEN_COUNTS,
)
COMPACTIONS: Final = InstrumentSpec(
    "toolprep.compactions",
    "counter",
    "{compaction}",
    "History compactions, by outcome (completed, failed, cancelled).",
)
PERMISSION_REQUESTS: Final = InstrumentSpec(
    "toolprep.permission.requests",
    "counter",
    "{request}",
    "Permission requests answered, by the option kind chosen (or cancelled).",
)
STORE_WRITE_DURATION: Final = InstrumentSpec(
    "toolprep.store.write.duration",
    "histogram",
    "s",
    "One write of frames or history to the session store, by result (ok, failed).",
    FAST_SECONDS,
)
EVENT_LOOP_LAG: Final = InstrumentSpec(
    "toolprep.event_loop.lag",
    "histogram",
    "s",
    "How late a loop ran a callback due then, sampled each second, by loop (streams, connections).",
    FAST_SECONDS,
)
TURN_INSTRUMENTS: Final = (
    ATTEMPTS,
    CARDS_DISCARDED,
    TOOL_CALLS,
    TOOL_CALL_DURATION,
    PREPARING_LATENCY,
    ARGUMENT_STREAMING,
    FIRST_CHUNK,
    TOKEN_USAGE,
    COMPACTIONS,
    PERMISSION_REQUESTS,
    STORE_WRITE_DURATION,
    EVENT_LOOP_LAG,
)
"""Recorded where a runtime runs its turns (``otel_observer``): in the serving process, or
in each worker, whose readings ``/metrics`` gathers."""
INSTRUMENTS: Final = (
    TURNS,
    SESSIONS_LIVE,
    CLIENTS_ATTACHED,
    FRAMES_CACHED_BYTES,
    CONNECTIONS_OPEN,
    SEND_BUFFER_BYTES,
    WORKER_RESTARTS,
    *TURN_INSTRUMENTS,
)


class SessionReadings(Protocol):
    """What a session pool tells at collection time."""

    @property
    def open_sessions(self) -> int: ...

    @property
    def attached_clients(self) -> int: ...

    @property
    def cached_frame_bytes(self) -> int: ...


class ConnectionReadings(Protocol):
    """What a server tells at collection time."""

    @property
    def connections(self) -> int: ...

    @property
    def send_buffer_bytes(self) -> int: ...


class Metrics:
    """The instruments, every method a no-op: what ``NO_METRICS`` is, and the base of the
    SDK-backed one. Thread-safe."""

    def turn_ended(self, outcome: TurnOutcome) -> None:
        """A prompt turn was answered (``outcome`` is its stop reason, or ``error``)."""

    def observe_sessions(self, readings: SessionReadings) -> None:
        """Read live sessions, attached clients and cached frames from ``readings`` at each
        collection."""

    def observe_connections(self, readings: ConnectionReadings) -> None:
        """Read open connections and buffered bytes from ``readings`` at each collection."""

    def observe_worker_restarts(self, restarts: Callable[[], int]) -> None:
        """Read the worker restarts so far from ``restarts`` at each collection."""


NO_METRICS: Final = Metrics()
