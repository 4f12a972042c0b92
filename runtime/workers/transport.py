"""What the routing front needs of a worker, wherever the worker runs.

``WorkerHost`` routes sessions by id, tracks their open cards and replaces a
worker that ended; none of that depends on how the frames reach the worker.
A transport carries the protocol's messages (``protocol``) both ways and says how its
worker ended: a child process over pipes (``process.WorkerProcess``) or a
shard actor on a Ray cluster (``toolprep.runtime.ray_host``). Whichever it
is, a worker that dies looks the same to the front: ``read`` returns
``None`` and ``exit_description`` says how it ended.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from toolprep.runtime.workers.protocol import Command, Event

__all__ = ["FrameOutput", "PlacementLog", "TransportFactory", "WorkerTransport"]


class FrameOutput(Protocol):
    """Where a worker loop writes its events: the pipe to the front, or a Ray stream."""

    def write(self, event: Event) -> None:
        """Send one event as a whole frame; frames written from several threads never
        interleave."""

    def write_many(self, events: Sequence[Event]) -> None:
        """Send several events in order, as whole frames handed on together (one write on
        a pipe); no other thread's frame comes between them."""


class WorkerTransport(Protocol):
    """One started worker as its front sees it."""

    slot: int

    @property
    def pid(self) -> int:
        """The worker's process id on its own machine (logs, drills, tests)."""

    def await_ready(self) -> None:
        """Block until the worker built its runtime; raise ``SessionHostError`` if it did not."""

    def send(self, command: Command) -> None:
        """Send one command, in order with every earlier one.

        Raises ``OSError`` when the worker cannot be reached; the reader then
        learns that it ended.
        """

    def read(self) -> Event | None:
        """The next event from the worker, blocking; ``None`` once it ended.

        Called from one thread only. Raises ``WireError`` or ``ProtocolError`` (or
        ``OSError`` / ``ValueError``) for something that is not an event.
        """

    def kill(self) -> None:
        """End the worker now, whatever it is doing."""

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the worker to end; True if it has."""

    def exit_description(self) -> str:
        """How the worker ended (``was killed by signal 9``), for logs and error replies.

        Waits a little for the end, then forces it.
        """

    def close(self) -> None:
        """Release what the front held of the ended worker (pipes, handles)."""

    def interrupt(self) -> None:
        """Make the worker stop its tool processes and exit; safe in a signal handler."""


TransportFactory = Callable[[int], WorkerTransport]
"""Starts the worker of a slot (at start-up, and again to replace one that ended)."""


class PlacementLog(Protocol):
    """Told where each session runs, for those beyond the front who look sessions up by id
    (a cluster-wide registry); the front itself routes by its own table."""

    def placed(self, session_id: str, slot: int) -> None:
        """``session_id`` is now open on the worker of ``slot``."""

    def forgot(self, session_id: str) -> None:
        """``session_id`` was closed."""
