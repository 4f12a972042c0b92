"""One daemon-owned session seen by any number of connections.

The host writes the session's output to a ``SharedSession`` (its only
sink); the shared session fans it out to every attached connection:

- each frame is encoded once and written as the same bytes to all of them,
  and kept (``FrameHistory``: finished turns compressed), so a connection
  that attaches later (``session/load``, a reconnect mid-turn) is sent
  everything before it, then the live frames, with nothing lost or doubled
  in between. The replay is paced to the client (it waits for room in the
  connection's send buffer, outside the lock, so the frames of this and
  every other session go on meanwhile); live frames that come during it
  wait in a catch-up list and follow it;
- with a store behind it, the frames kept are bounded (``StoredFrameCache``):
  older finished turns are read back from the store when a replay reaches them;
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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, assert_never, runtime_checkable

import orjson

from toolprep.messages.permissions import PermissionOutcome
from toolprep.runtime.daemon.frame_history import FrameHistory
from toolprep.runtime.kernel.session_host import (
    ClientRequest,
    EditorFailed,
    ReadTextFile,
    RequestPermission,
    SessionHost,
    WriteTextFile,
)

__all__ = [
    "DEFAULT_FRAME_CACHE_BYTES",
    "ClientConnection",
    "SharedSession",
    "StoredFrameCache",
    "StoredFrames",
]

logger = logging.getLogger(__name__)

REPLAY_ROOM_TIMEOUT_S = 30.0
"""How long a replay waits for its client to make room for the next frame; past it the
frame is written anyway, and a client that still reads nothing is cut off as a slow one."""

CAUGHT_UP_BYTES = 64 * 1024
"""Live frames held during a replay up to this size are sent under the lock at its end;
more are replayed (paced) again first."""


DEFAULT_FRAME_CACHE_BYTES: Final = 1024 * 1024
"""Compressed finished turns a live session keeps for replays (``--frame-cache``): a few
hundred ordinary turns; anything older is read back from the store."""


class StoredFrames(Protocol):
    """Where a session's frames are stored: the store's ``FrameLog``."""

    def last_seq(self, session_id: str) -> int: ...

    def encoded_frames(
        self, session_id: str, after_seq: int = 0, through_seq: int | None = None
    ) -> tuple[bytes, ...]: ...


@dataclass(frozen=True, slots=True)
class StoredFrameCache:
    """A bound on a session's kept frames, and the store that holds what it forgets."""

    store: StoredFrames
    budget_bytes: int = DEFAULT_FRAME_CACHE_BYTES


@runtime_checkable
class ClientConnection(Protocol):
    """What a shared session needs of a connection: an ACP ``ConnectionSink``."""

    def send_encoded_update(self, session_id: str, update_json: bytes) -> None: ...

    def wait_for_room(self, nbytes: int, timeout: float) -> bool: ...

    def send_request(self, session_id: str, request: ClientRequest) -> None: ...

    def withdraw_request(self, session_id: str, request_id: str, reason: str) -> None: ...


class SharedSession:
    """The ``FrameSink`` a daemon gives the host for one session. Thread-safe."""

    def __init__(
        self, session_id: str, host: SessionHost, cwd: str, cache: StoredFrameCache | None = None
    ) -> None:
        """Without ``cache`` (no store) every frame is kept: this copy is the session's log."""
        self.session_id = session_id
        self.cwd = cwd
        self.created_at = time.time()
        self.updated_at = self.created_at
        self._host = host
        self._lock = threading.RLock()
        self._attached: list[ClientConnection] = []
        self._catching_up: dict[ClientConnection, list[bytes]] = {}
        """Clients being replayed to, with the live frames that wait for the replay's end."""
        self._frames = FrameHistory()
        self._cache = cache
        self._permissions: dict[str, RequestPermission] = {}
        self._driver: ClientConnection | None = None
        self._turns = 0

    # --- the host's side: FrameSink -------------------------------------------------------

    def send_update(self, session_id: str, update: dict[str, Any]) -> None:
        self.send_encoded_update(session_id, orjson.dumps(update))

    def send_updates(self, frames: Sequence[tuple[str, dict[str, Any]]]) -> None:
        for session_id, update in frames:
            self.send_encoded_update(session_id, orjson.dumps(update))

    def send_encoded_update(self, session_id: str, update_json: bytes) -> None:
        with self._lock:
            self._frames.append(update_json)
            self.updated_at = time.time()
            for client in self._attached:
                if client not in self._catching_up:
                    self._deliver(client, update_json)
            for held in self._catching_up.values():
                held.append(update_json)

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
        A replay runs on the calling thread (the client's own request handler)
        and waits for the client to read; it never holds the lock while it waits.
        """
        if replay:
            with self._lock:
                self._catching_up.setdefault(client, [])  # a second load joins the first's list
                forgotten = self._frames.forgotten_through
                backlog = list(self._frames.after(after_seq))
            if forgotten > after_seq:
                backlog[:0] = self._read_forgotten(client, after_seq, forgotten)
            unanswered = self._catch_up(client, backlog)
            if unanswered is None:
                return  # detached meanwhile, or its connection broke
        else:
            with self._lock:
                unanswered = self._join_locked(client)
        for request in unanswered:
            self._ask(client, request)

    def _read_forgotten(
        self, client: ClientConnection, after_seq: int, through_seq: int
    ) -> tuple[bytes, ...]:
        """The frames after ``after_seq`` up to ``through_seq`` that only the store keeps now;
        read outside the lock, so the session's live frames go on meanwhile."""
        assert self._cache is not None  # nothing is forgotten without a store
        try:
            return self._cache.store.encoded_frames(self.session_id, after_seq, through_seq)
        except BaseException:
            with self._lock:
                self._catching_up.pop(client, None)
            raise

    def restored(self) -> None:
        """The store's frames were replayed into this session as it opened: they are kept as
        a finished turn, within the cache's bound."""
        with self._lock:
            self._frames.seal()
            self._forget_stored()

    def _forget_stored(self) -> None:
        """Under the lock: forget the oldest finished turns past the cache's budget."""
        cache = self._cache
        if cache is None or self._frames.sealed_bytes <= cache.budget_bytes:
            return
        try:
            stored_seq = cache.store.last_seq(self.session_id)
        except Exception as exc:  # the store is failing: keep the frames until it answers
            logger.info(
                "frames of %s kept: the store did not say what it holds: %r", self.session_id, exc
            )
            return
        self._frames.forget_stored(cache.budget_bytes, stored_seq)

    def _join_locked(self, client: ClientConnection) -> list[RequestPermission]:
        """Attach ``client`` (once); the permission requests it is to be asked."""
        if client in self._attached:
            return []
        self._attached.append(client)
        return list(self._permissions.values())

    def _catch_up(
        self, client: ClientConnection, backlog: list[bytes]
    ) -> list[RequestPermission] | None:
        """Send ``backlog`` paced, then the live frames held meanwhile, until few are left;
        those go under the lock, and the client is attached in the same hold, so no frame
        comes between them and the next live one. None if it cannot be attached."""
        while True:
            sent = self._send_paced(client, backlog)
            with self._lock:
                held = self._catching_up.get(client)
                if held is None:
                    return None
                if not sent or sum(map(len, held)) <= CAUGHT_UP_BYTES:
                    del self._catching_up[client]
                    for frame in held:
                        self._deliver(client, frame)
                    return self._join_locked(client) if sent else None
                backlog, self._catching_up[client] = held, []

    def _send_paced(self, client: ClientConnection, frames: list[bytes]) -> bool:
        for frame in frames:
            client.wait_for_room(len(frame), REPLAY_ROOM_TIMEOUT_S)
            try:
                client.send_encoded_update(self.session_id, frame)
            except Exception as exc:  # a gone connection; it detaches when its reader ends
                logger.info("replay of %s to one client stopped: %r", self.session_id, exc)
                return False
        return True

    def detach(self, client: ClientConnection) -> bool:
        """Remove ``client``; True if no connection is attached any more."""
        with self._lock:
            self._catching_up.pop(client, None)
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
                self._forget_stored()

    @property
    def attached(self) -> int:
        with self._lock:
            return len(self._attached)

    @property
    def kept_bytes(self) -> int:
        """What this session's kept frames take in memory."""
        with self._lock:
            return self._frames.kept_bytes

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
