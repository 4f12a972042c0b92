"""What a ``WorkerHost`` knows of its workers and sessions, under one lock.

The front's parts (the calls it makes, the readers of what workers send, the
restarts of workers that died) share this one record: which worker serves each
session, which calls await a worker's answer, and how each slot fares. Each part
changes it only while holding ``HostState.lock``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Literal

from toolprep.messages.content import Part
from toolprep.messages.modes import SessionMode
from toolprep.messages.turns import TurnResult, UserMessage
from toolprep.runtime.kernel.session_host import (
    EditorCapabilities,
    FrameSink,
    NoWorkerAvailable,
    SessionConfig,
    UnknownSession,
)
from toolprep.runtime.mcp.specs import McpServerSpec
from toolprep.runtime.workers.backoff import SlotHealth
from toolprep.runtime.workers.protocol import Command
from toolprep.runtime.workers.transport import WorkerTransport

__all__ = [
    "Answer",
    "CallKind",
    "DeferredPrompt",
    "HostState",
    "PendingCall",
    "RoutedSession",
    "ToCommand",
    "WorkerCrashed",
    "WorkerSlot",
]


class WorkerCrashed(NoWorkerAvailable):
    """The worker process serving a session is gone (and is being replaced, or waits out
    its back-off): a call to the session may be made again in ``retry_after`` seconds,
    so an editor is told -32005 with ``retryAfter``, as for a session with no worker."""


CallKind = Literal["open", "prompt", "answer"]

Answer = str | bool | SessionConfig | None
"""What a call other than a prompt returns: an opened session's id, an answer taken or
not, a session's settings, or nothing."""

ToCommand = Callable[[int], Command]
"""A command to a session's worker, given the id its reply will quote."""


@dataclass(eq=False)
class PendingCall:
    """A call awaiting a worker's answer."""

    kind: CallKind
    session: RoutedSession | None
    """The session the call is about; None for a question to the worker itself."""
    future: Future[Answer] = field(default_factory=Future)
    turn: Future[TurnResult] = field(default_factory=Future)
    """A prompt's result (``kind == "prompt"``); ``future`` for every other call."""


@dataclass(frozen=True, slots=True)
class DeferredPrompt:
    """A prompt that arrived while its session's worker was being replaced."""

    parts: tuple[Part, ...]
    user_message: UserMessage | None
    result: Future[TurnResult]


@dataclass(eq=False)
class RoutedSession:
    """A session as the front knows it: where it runs and what a successor needs."""

    session_id: str
    sink: FrameSink
    cwd: str
    editor: EditorCapabilities
    worker: WorkerSlot
    open_cards: dict[str, tuple[str, bool]] = field(default_factory=dict)
    """Each open card's tool, and whether its call started (it may have run)."""
    prompts: set[int] = field(default_factory=set)
    # Prompts that arrived while the session's worker was being replaced.
    deferred: list[DeferredPrompt] = field(default_factory=list)
    closed: bool = False
    # Sent with every open, so a replacement worker starts them again.
    mcp_servers: tuple[McpServerSpec, ...] = ()
    model: str | None = None  # chosen by set_model; given again to a replacement worker
    mode: SessionMode | None = None  # chosen by set_mode; likewise

    def take_deferred(self) -> list[DeferredPrompt]:
        """The prompts that waited for a worker, which no longer wait here."""
        deferred, self.deferred = self.deferred, []
        return deferred


class WorkerSlot:
    """One worker, whatever carries its frames, and the front's bookkeeping for it."""

    def __init__(self, transport: WorkerTransport) -> None:
        self.transport = transport
        self.slot = transport.slot
        self.alive = False
        self.sessions: dict[str, RoutedSession] = {}
        self.calls: dict[int, PendingCall] = {}
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


class HostState:
    """The open sessions, the workers by slot and each slot's health, behind ``lock``."""

    def __init__(self, workers: int) -> None:
        self.lock = threading.Lock()
        self.sessions: dict[str, RoutedSession] = {}
        self.workers: list[WorkerSlot] = []
        self.closed = False
        self.health = {slot: SlotHealth() for slot in range(workers)}
        self.stopping = threading.Event()  # wakes slots waiting out their back-off
        self.replacing: set[int] = set()
        self.restarts = 0

    def require(self, session_id: str) -> RoutedSession:
        """The open session ``session_id``; called with the lock held."""
        session = self.sessions.get(session_id)
        if session is None:
            raise UnknownSession(session_id)
        return session

    def down(self, worker: WorkerSlot) -> WorkerCrashed:
        """Why ``worker`` takes no calls, and when its slot starts again; called with the
        lock held."""
        health, now = self.health[worker.slot], time.monotonic()
        if health.crashes:
            return WorkerCrashed(health.describe(worker.slot, now), health.retry_after(now))
        why = f"the worker process serving this session (slot {worker.slot}) is not running"
        return WorkerCrashed(why, health.retry_after(now))
