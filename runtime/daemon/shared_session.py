"""One daemon-owned session seen by any number of connections.

The host writes the session's output to a ``SharedSession`` (its only
sink); the shared session fans it out to every attached connection:

- each frame is encoded once and written as the same bytes to all of them,
  and kept (``FrameHistory``: finished turns compressed), so a connection
  that attaches later (``session/load``, a reconnect mid-turn) is sent
  everything before it, then the live frames, with nothing lost or doubled
  in between (attaching and fanning out take the same lock);
- a permission request goes to every attached connection, and to each one
  that attaches while it is unanswered; the first answer wins and the
  other connections' requests are withdrawn (``$/cancel_request``);
- an editor request (``fs/*``) goes to the connection whose prompt is
  running, or else the one attached last; with none attached it fails at
  once, so no tool waits for an editor that is not there.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Protocol, assert_never, runtime_checkable

import orjson

from toolprep.messages.permissions import PermissionOutcome
from toolprep.runtime.daemon.frame_history import FrameHistory
from toolprep.runtime.session_host import (
    ClientRequest,
    EditorFailed,
    ReadTextFile,
    RequestPermission,
    SessionHost,
    WriteTextFile,
)

__all__ = ["ClientConnection", "SharedSession"]

logger = logging.getLogger(__name__)


@runtime_checkable
class ClientConnection(Protocol):
    """What a shared session needs of a connection: an ACP ``ConnectionSink``."""

    def send_encoded_update(self, session_id: str, update_json: bytes) -> None: ...

    def send_request(self, session_id: str, request: ClientRequest) -> None: ...

    def withdraw_request(self, session_id: str, request_id: str, reason: str) -> None: ...


class SharedSession:
    """The ``FrameSink`` a daemon gives the host for one session. Thread-safe."""

    def __init__(self, session_id: str, host: SessionHost, cwd: str) -> None:
        self.session_id = session_id
        self.cwd = cwd
        self.created_at = time.time()
        self.updated_at = self.created_at
        self._host = host
        self._lock = threading.RLock()
        self._attached: list[ClientConnection] = []
        self._frames = FrameHistory()
        self._permissions: dict[str, RequestPermission] = {}
        self._driver: ClientConnection | None = None
        self._turns = 0

    # --- the host's side: FrameSink -------------------------------------------------------

    def send_update(self, session_id: str, update: dict[str, Any]) -> None:
        self.send_encoded_update(session_id, orjson.dumps(update))

    def send_encoded_update(self, session_id: str, update_json: bytes) -> None:
        with self._lock:
            self._frames.append(update_json)
            self.updated_at = time.time()
            for client in list(self._attached):
                self._deliver(client, update_json)

    def send_request(self, session_id: str, request: ClientRequest) -> None:
        match request:
            case RequestPermission():
                with self._lock:
                    self._permissions[request.request_id] = request
                    clients = list(self._attached)
                for client in clients:
                    self._ask(client, request)
            case ReadTextFile() | WriteTextFile():
                with self._lock:
                    driver = self._driver if self._driver in self._attached else None
                    editor = driver or (self._attached[-1] if self._attached else None)
                if editor is None:
                    self._host.answer_editor(
                        self.session_id,
                        request.request_id,
                        EditorFailed("no editor is attached to this session"),
                    )
                    return
                self._ask(editor, request)
            case _:
                assert_never(request)

    # --- the connections' side ------------------------------------------------------------

    def attach(self, client: ClientConnection, *, replay: bool, after_seq: int = 0) -> None:
        """Add ``client``; with ``replay`` it is sent every frame so far numbered after
        ``after_seq``, before any new one.

        A client attached already stays attached once; a load from it is still
        answered with the replay it asked for (an editor reloading its thread).
        """
        with self._lock:
            if replay:
                for frame in self._frames.after(after_seq):
                    self._deliver(client, frame)
            if client in self._attached:
                return
            self._attached.append(client)
            unanswered = list(self._permissions.values())
        for request in unanswered:
            self._ask(client, request)

    def detach(self, client: ClientConnection) -> bool:
        """Remove ``client``; True if no connection is attached any more."""
        with self._lock:
            if client in self._attached:
                self._attached.remove(client)
            if self._driver is client:
                self._driver = None
            return not self._attached

    def answer_permission(
        self, client: ClientConnection, request_id: str, outcome: PermissionOutcome
    ) -> bool:
        """The first answer to a permission request wins; the others' requests are withdrawn."""
        with self._lock:
            request = self._permissions.pop(request_id, None)
            others = [c for c in self._attached if c is not client]
        if request is None:
            return False
        answered = self._host.answer_permission(self.session_id, request_id, outcome)
        for other in others:
            other.withdraw_request(
                self.session_id, request_id, "answered by another client of this session"
            )
        return answered

    def turn_started(self, driver: ClientConnection) -> None:
        with self._lock:
            self._turns += 1
            self._driver = driver

    def turn_ended(self) -> None:
        with self._lock:
            self._turns -= 1
            if self._turns == 0:
                # Closing the turn settled them in the host; nobody can answer them now.
                self._permissions.clear()
                self._frames.seal()

    @property
    def attached(self) -> int:
        with self._lock:
            return len(self._attached)

    @property
    def kept_bytes(self) -> int:
        """What this session's kept frames take in memory."""
        with self._lock:
            return self._frames.stored_bytes

    @property
    def running(self) -> bool:
        with self._lock:
            return self._turns > 0

    def _deliver(self, client: ClientConnection, frame: bytes) -> None:
        try:
            client.send_encoded_update(self.session_id, frame)
        except Exception as exc:  # a gone connection; it detaches when its reader ends
            logger.info("frame for %s not delivered to one client: %r", self.session_id, exc)

    def _ask(self, client: ClientConnection, request: ClientRequest) -> None:
        try:
            client.send_request(self.session_id, request)
        except Exception as exc:
            logger.info("request to one client of %s failed: %r", self.session_id, exc)
