"""The base every role actor shares: typed dispatch and crash hand-over.

Messages are dispatched on their class to ``handlers`` registered by the
subclass. A handler that raises is a crash: pykka stops the actor and calls
``on_failure``, where the directory starts a successor over the same state and
the supervisor is told which sessions the poisoned message belonged to: one, or
every session of a batch (``ChunksReceived``, ``WriteFrames``), each of whose
attempts may have lost its chunks or frames with it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import pykka

from toolprep.actors.directory import RoleDirectory
from toolprep.messages.turns import (
    ActorCrashed,
    ChunksReceived,
    CrashRole,
    WriteFrames,
)

logger = logging.getLogger(__name__)

SUPERVISOR = "supervisor"
READER = "reader"
TRACKER = "tracker"
EXECUTOR = "executor"
EMITTER = "emitter"


class InjectedFault(RuntimeError):
    """Raised on purpose by ``CrashRole``."""


Handlers = Mapping[type, Callable[[Any], None]]


class RoleActor(pykka.ThreadingActor):
    role: ClassVar[str]
    use_daemon_thread = True

    def __init__(self, directory: RoleDirectory) -> None:
        super().__init__()
        self.directory = directory
        self._current: object | None = None
        self._dispatch: dict[type, Callable[[Any], None]] | None = None

    def handlers(self) -> Handlers:
        """Message class -> handler; read on the first message, once the actor is built."""
        raise NotImplementedError

    def on_receive(self, message: Any) -> Any:
        if self._dispatch is None:
            self._dispatch = {CrashRole: self._crash, **self.handlers()}
        handler = self._dispatch.get(type(message))
        if handler is None:
            logger.warning("%s ignored unknown message %r", self.role, type(message).__name__)
            return None
        self._current = message
        handler(message)
        self._current = None
        return None

    def _crash(self, message: CrashRole) -> None:
        raise InjectedFault(message.reason)

    def on_failure(self, exception_type: Any, exception_value: Any, traceback: Any) -> None:
        affected = sessions_of(self._current)
        successor = self.directory.restart_after_crash(self, exception_value)
        if successor is None:
            return
        for session_id in affected or (None,):
            notice = ActorCrashed(
                role=self.role, error=repr(exception_value), session_id=session_id
            )
            self.directory.tell(SUPERVISOR, notice)


def sessions_of(message: object) -> tuple[str, ...]:
    """The sessions ``message`` carries work of, in order, each once."""
    match message:
        case ChunksReceived(batches=batches):
            ids = [batch.session_id for batch in batches]
        case WriteFrames(writes=writes):
            ids = [write.session_id for write in writes]
        case _:
            session_id = getattr(message, "session_id", None)
            ids = [session_id] if isinstance(session_id, str) else []
    return tuple(dict.fromkeys(ids))
