"""What the supervisor keeps per session and per turn, and the settings its turns run under.

The supervisor's steps (``session_supervisor``, ``history_compaction``) read and change
these; they are plain data, so a restarted supervisor goes on over the same objects.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Literal

from toolprep.messages.content import Content, Part, Usage
from toolprep.messages.turns import TurnResult
from toolprep.runtime.kernel.compaction import CompactionPolicy
from toolprep.runtime.kernel.retry import RetryPolicy
from toolprep.runtime.providers.base import ToolDeclaration

__all__ = [
    "AfterAttempt",
    "NextStep",
    "Phase",
    "SessionState",
    "SupervisorState",
    "Turn",
    "TurnConfig",
]

Phase = Literal["idle", "compacting", "streaming", "ending", "backoff", "tools"]
"""Where a session's turn is: a message is acted on only in the phases it belongs to."""


@dataclass(frozen=True, slots=True)
class TurnConfig:
    """What every turn of the runtime runs under: the request's settings and its policies."""

    system_prompt: str | None = None
    max_tokens: int = 4096
    max_requests_per_turn: int = 50
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    compaction: CompactionPolicy = field(default_factory=CompactionPolicy)


NextStep = Literal[
    "retry", "compact", "fallback", "cancel", "refusal", "max_tokens", "crash", "fail"
]


@dataclass(frozen=True, slots=True)
class AfterAttempt:
    """What the supervisor does once the tracker confirms an attempt's cards are terminal."""

    step: NextStep
    delay: float = 0.0  # seconds of backoff, for ``retry`` only


@dataclass(slots=True)
class Turn:
    """The running turn of a session: its reply, and what its attempts learnt so far."""

    reply: Future[TurnResult]
    history_mark: int  # where the turn's prompt is in the history
    prompt: tuple[Part, ...] = ()
    requests: int = 0
    cancel_requested: bool = False
    usage: Usage | None = None
    attempt_usage: Usage | None = None  # what the current attempt's reply said it used
    last_error: str | None = None
    model_failed: bool = False  # the last failure was the model request's, not a crash
    compacted: bool = False  # the history's start was replaced by a summary
    overflowed: bool = False  # a request was refused as too large for the context window
    too_large: bool = False  # the last failure was such a refusal
    # what to do once the tracker confirms the attempt ended
    after: AfterAttempt | None = None


@dataclass(slots=True)
class SessionState:
    """A session as the supervisor keeps it: its history, its attempt number and phase."""

    session_id: str
    cwd: str
    history: list[Content] = field(default_factory=list)
    attempt: int = 0
    first_route: int = 0  # the session's chosen model; the other routes are its fallbacks
    order: tuple[int, ...] = ()  # this turn's routes, the chosen one first
    route: int = 0  # position in ``order``
    retries: int = 0
    phase: Phase = "idle"
    turn: Turn | None = None
    closing: bool = False
    closed: Future[None] | None = None  # resolved by the emitter once the close is done
    tools: tuple[ToolDeclaration, ...] = ()  # the session's own, after the runtime's
    used: int = 0  # tokens the last request used; 0 once compaction was tried on them
    summarised: int = 0  # while compacting: how many leading messages the summary replaces


@dataclass(slots=True)
class SupervisorState:
    """Every session, and counts of the attempts, retries and fallbacks across them."""

    sessions: dict[str, SessionState] = field(default_factory=dict)
    attempts_started: int = 0
    retries: int = 0
    fallbacks: int = 0
    delays: list[float] = field(default_factory=list)
