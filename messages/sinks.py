"""Where a session's output goes: the one interface the emitter writes to (and the journal
that may keep a copy).

An ACP connection, a session host's relay or a test's recorder implements it; the emitter
is told which one with ``AttachSink``, so the message and the emitter share this type.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, Protocol, TypeAlias

from toolprep.messages.content import Content
from toolprep.messages.permissions import PermissionRequest

UpdatesWriter: TypeAlias = Callable[[Sequence[tuple[str, dict[str, Any]]]], None]
"""A sink's optional ``send_updates(frames)``: ``(session_id, update)`` pairs of any of the
sessions it serves, sent in order and written together (one system call for a batch of
frames on a stream, not one each). The emitter uses it where a sink has it, and writes
the frames of every session whose sinks share one ``send_updates`` (a bound method
compares by its object) in one call."""


class SessionSink(Protocol):
    def send_update(self, session_id: str, update: dict[str, Any]) -> None: ...

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
