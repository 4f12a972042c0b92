"""What the roles tell whoever watches a runtime: its turns, their attempts and their cards.

The roles call a ``TurnObserver`` at the moments its methods name, and go on: the
observer draws its spans and instruments from them (``runtime/telemetry``). With
telemetry off the roles hold ``NO_OBSERVER``, whose methods return at once, so a turn
pays one method call per event and nothing is imported.

Cards are not reported one by one: the emitter hands over each batch of frames it
wrote (``frames_written``), and the observer reads the tool-call frames among them
(preparing shown, running, finished, discarded with its reason) as a client would.
The tracker says only what no frame carries: when the chunk naming a tool was read
(``tool_named``), the start of the wait the preparing card covers.

An observer is called from several role threads and inside their handlers: it must be
thread-safe, must not block and must not raise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

from toolprep.messages.content import Usage
from toolprep.messages.turns import EndReason

__all__ = [
    "NO_OBSERVER",
    "AttemptOutcome",
    "CompactionOutcome",
    "LoopName",
    "TurnEnd",
    "TurnObserver",
]

AttemptOutcome = Literal["succeeded"] | EndReason
"""How a model attempt ended: its reply taken, or abandoned for an ``EndReason``."""

CompactionOutcome = Literal["completed", "failed", "cancelled"]

LoopName = Literal["streams", "connections"]
"""The provider streams' loop (the reader's), or the daemon's client connections' loop."""

TurnEnd = Literal["end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled", "error"]
"""A turn's ACP stop reason, or ``error`` for a prompt answered with an error."""


class TurnObserver:
    """Every method a no-op: what ``NO_OBSERVER`` is, and the base of real observers.

    Times are ``time.monotonic()`` readings of this process."""

    def turn_started(self, session_id: str, trace_context: Mapping[str, str]) -> None:
        """A prompt was taken in; ``trace_context`` holds the caller's W3C ``traceparent``
        (and ``tracestate``) if its request carried them, else nothing."""

    def turn_ended(self, session_id: str, end: TurnEnd) -> None:
        """The session's turn was answered."""

    def attempt_started(
        self, session_id: str, attempt: int, model: str, *, retry: int, fallback: bool
    ) -> None:
        """A model request went out: ``retry`` failed tries of this model before it in the
        turn, ``fallback`` when the model is not the turn's first choice."""

    def first_chunk(self, session_id: str, attempt: int, received_at: float) -> None:
        """The attempt's first chunk was read from the provider."""

    def attempt_ended(
        self, session_id: str, attempt: int, outcome: AttemptOutcome, usage: Usage | None
    ) -> None:
        """The attempt's reply was taken (``succeeded``, with its usage) or abandoned."""

    def tool_named(self, session_id: str, call_id: str, tool_name: str, received_at: float) -> None:
        """A chunk read at ``received_at`` named a tool; its preparing card follows."""

    def frames_written(self, session_id: str, updates: Sequence[dict[str, Any]]) -> None:
        """The emitter wrote these ``session/update`` payloads to the session's clients."""

    def permission_asked(self, session_id: str, call_id: str) -> None:
        """The user was asked whether the call may run."""

    def permission_answered(self, session_id: str, call_id: str, outcome: str) -> None:
        """The user answered (``outcome``: the option kind chosen, or ``cancelled``)."""

    def compaction_started(self, session_id: str) -> None:
        """The session's history is being summarised to fit the context window."""

    def compaction_ended(self, session_id: str, outcome: CompactionOutcome) -> None:
        """The summary was taken, failed, or dropped with a cancelled turn."""

    def store_written(self, seconds: float, ok: bool) -> None:
        """One write to the session store took ``seconds`` and succeeded or failed."""

    def event_loop_lag(self, loop: LoopName, seconds: float) -> None:
        """The ``loop`` ran a callback ``seconds`` late (``runtime.kernel.loop_lag``)."""

    def worker_ended(self, slot: int, how: str, sessions: int) -> None:
        """A worker process (or Ray shard) serving ``sessions`` sessions ended unasked
        (``how``: its exit, as the log says it); it is being replaced."""


NO_OBSERVER: Final = TurnObserver()
