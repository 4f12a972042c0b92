"""The sessions a ``Runtime`` has open, and the closes its roles have not finished.

One lock guards everything the host keeps per open session (its route, its
directory, its mode, its editor's filesystem, whether it was shown the session
notice) and the closes still under way, so that opening, closing and changing a
session are each one step. Closing a session returns at once; the roles wind it
down after. Opening the same id again first waits for that to finish
(``await_close``), so nothing of the closed session reaches the new one and its
clean-up cannot undo the new one.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future

from toolprep.messages.modes import SessionMode
from toolprep.runtime.kernel.session_host import HostClosed, UnknownSession
from toolprep.runtime.tools.base import ClientFilesystem

logger = logging.getLogger(__name__)

__all__ = ["CLOSE_WAIT_S", "OpenSessions", "wait_until_closed"]

CLOSE_WAIT_S = 5.0
"""How long opening a session id again waits for the roles to finish its earlier close."""


class OpenSessions:
    """Each open session's route, directory, mode and editor filesystem, under one lock."""

    def __init__(self, default_mode: SessionMode) -> None:
        self._lock = threading.Lock()
        self._default_mode = default_mode
        # Each open session and the route its turns start with (its chosen model).
        self._routes: dict[str, int] = {}
        self._cwds: dict[str, str] = {}  # each open session's directory
        self._noticed: set[str] = set()  # sessions shown the session notice
        self._modes: dict[str, SessionMode] = {}  # each open session's mode
        self._client_fs: dict[str, ClientFilesystem] = {}
        self._closing: dict[str, Future[None]] = {}  # closes the roles have not finished
        self._closed = False  # the host shut down

    def add(
        self,
        session_id: str,
        route: int,
        cwd: str,
        mode: SessionMode,
        client_fs: ClientFilesystem | None,
    ) -> None:
        """Note a session being opened; refused once shut down or if the id is open."""
        with self._lock:
            if self._closed:
                raise HostClosed("the runtime is shut down")
            if session_id in self._routes:
                raise ValueError(f"a session with this id is already open: {session_id}")
            self._routes[session_id] = route
            self._cwds[session_id] = cwd
            self._modes[session_id] = mode
            if client_fs is not None:
                self._client_fs[session_id] = client_fs

    def discard(self, session_id: str) -> None:
        """Forget a session whose opening failed."""
        with self._lock:
            self._forget(session_id)

    def _forget(self, session_id: str) -> None:
        self._routes.pop(session_id, None)
        self._cwds.pop(session_id, None)
        self._noticed.discard(session_id)
        self._modes.pop(session_id, None)
        self._client_fs.pop(session_id, None)

    def remove(self, session_id: str, closed: Future[None]) -> bool:
        """Forget a session being closed, its close under way until ``closed`` is done.

        Returns whether the roles still run (they finish the close only then).
        """
        with self._lock:
            if session_id not in self._routes:
                raise UnknownSession(session_id)
            self._forget(session_id)
            self._closing[session_id] = closed  # in the same step, so a reopen sees it
            return not self._closed

    def shut(self) -> bool:
        """Take no session from now on; False if that was so already."""
        with self._lock:
            if self._closed:
                return False
            self._closed = True
            return True

    def taking_prompts(self, session_id: str) -> bool:
        """False once shut down; ``UnknownSession`` if the session is not open."""
        with self._lock:
            if self._closed:
                return False
            if session_id not in self._routes:
                raise UnknownSession(session_id)
            return True

    def require(self, session_id: str) -> None:
        with self._lock:
            if session_id not in self._routes:
                raise UnknownSession(session_id)

    def has(self, session_id: str) -> bool:
        with self._lock:
            return session_id in self._routes

    def settings(self, session_id: str) -> tuple[int, SessionMode]:
        """The session's route and mode; ``UnknownSession`` if it is not open."""
        with self._lock:
            route = self._routes.get(session_id)
            mode = self._modes.get(session_id, self._default_mode)
        if route is None:
            raise UnknownSession(session_id)
        return route, mode

    def choose_route(self, session_id: str, route: int) -> SessionMode:
        """Start the session's later turns on ``route``; returns its mode."""
        with self._lock:
            if session_id not in self._routes:
                raise UnknownSession(session_id)
            self._routes[session_id] = route
            return self._modes[session_id]

    def choose_mode(self, session_id: str, mode: SessionMode) -> int:
        """Put the session in ``mode``; returns its route."""
        with self._lock:
            route = self._routes.get(session_id)
            if route is None:
                raise UnknownSession(session_id)
            self._modes[session_id] = mode
            return route

    def mode_of(self, session_id: str) -> SessionMode:
        """The session's mode now (the default for a session no longer open)."""
        with self._lock:
            return self._modes.get(session_id, self._default_mode)

    def client_fs_for(self, session_id: str) -> ClientFilesystem | None:
        """The editor's filesystem for the session, if its editor offers one."""
        return self._client_fs.get(session_id)

    def directories(self) -> set[str]:
        with self._lock:
            return set(self._cwds.values())

    def first_notice(self, session_id: str) -> bool:
        """True the first time it is asked for the session (it is shown the notice then)."""
        with self._lock:
            first = session_id not in self._noticed
            self._noticed.add(session_id)
            return first

    def close_done(self, session_id: str, closed: Future[None]) -> None:
        """Runs on the emitter's thread once it detached the sink; must not block."""
        with self._lock:
            if self._closing.get(session_id) is closed:
                del self._closing[session_id]

    def await_close(self, session_id: str) -> None:
        """Wait until the roles finished closing ``session_id``, if it was just closed.

        ``close_session`` only tells the supervisor; the sink is detached later,
        by the emitter, once the supervisor has forgotten the session. A session
        opened under the same id before then would have its new sink detached by
        that late ``DetachSink`` (its turns' frames lost), be forgotten when the
        old turn ends, and get the old turn's discards. Waiting orders the old
        session's clean-up before anything the new one sends. Should the close
        not finish in ``CLOSE_WAIT_S`` (a role that stopped taking messages),
        the open goes ahead rather than leave the id unusable.
        """
        with self._lock:
            closing = self._closing.get(session_id)
            if closing is None or self._closed:
                return
        if not wait_until_closed(closing, f"opening {session_id} again"):
            self.close_done(session_id, closing)


def wait_until_closed(closed: Future[None], doing: str) -> bool:
    """False, and a warning, if the roles did not finish the close in ``CLOSE_WAIT_S``."""
    try:
        closed.result(timeout=CLOSE_WAIT_S)
    except TimeoutError:
        logger.warning("%s although its close did not finish within %.0f s", doing, CLOSE_WAIT_S)
        return False
    return True
