"""Where a session's output goes: the one frame-writing interface every sink implements
(``UpdateSink``), the emitter's ``SessionSink`` over it, and the journal that may keep a copy.

An ACP connection, a session host's relay or a test's recorder implements it; the emitter
is told which one with ``AttachSink``, so the message and the emitter share this type. A
host's ``FrameSink`` (``runtime/kernel/session_host.py``) is the same ``UpdateSink`` with
requests sent as values instead of ``request_permission``.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any, Protocol

from toolprep.messages.content import Content
from toolprep.messages.permissions import PermissionRequest


class UpdateSink(Protocol):
    """The frame-writing half of every sink: what the emitter and the hosts write frames to.

    Both methods are required. ``send_updates`` is the one the emitter calls: a batch's
    frames of every session a sink serves go to it in one call, in order (one system call
    for a batch on a stream, not one each); the emitter groups the sessions whose sinks
    share one ``send_updates`` (a bound method compares by its object). A sink that writes
    frames one at a time writes each of the batch, goes on after one that fails, then
    raises, so one broken frame does not lose the others.
    """

    def send_update(self, session_id: str, update: dict[str, Any]) -> None:
        """One ACP ``session/update`` payload of ``session_id``."""
        ...

    def send_updates(self, frames: Sequence[tuple[str, dict[str, Any]]]) -> None:
        """``(session_id, update)`` pairs of any of the sessions served, in order, together."""
        ...


class SessionSink(UpdateSink, Protocol):
    """The emitter's sink for a session: frames, and permission requests answered with a
    future (which cannot cross a process; a host's ``FrameSink`` sends requests as values)."""

    def request_permission(
        self, session_id: str, tool_call: dict[str, Any], request: PermissionRequest
    ) -> Future[str]: ...


class FrameJournal(Protocol):
    """Keeps what sessions sent and saw, so they can be loaded again later.

    The emitter calls it on its own thread, before each frame reaches the
    session's sink and before a turn's result is delivered; it must not raise.
    """

    def record(self, session_id: str, update: dict[str, Any]) -> dict[str, Any]:
        """Keep ``update``; returns it as the clients are to get it (numbered in the log)."""
        ...

    def commit(self, session_id: str) -> str | None:
        """Store what the session recorded so far; None once stored, else why it is not."""
        ...

    def turn_ended(
        self, session_id: str, history: tuple[Content, ...], *, rewritten: bool = False
    ) -> dict[str, Any] | None:
        """Keep ``history``; ``rewritten``: its start was replaced (compacted), not appended to.

        Returns None if all the session recorded is stored, else a frame for its clients
        saying what is not and why (kept like any other).
        """
        ...


__all__ = ["FrameJournal", "SessionSink", "UpdateSink"]
