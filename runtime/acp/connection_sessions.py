"""The sessions one ACP connection opened, loaded or resumed: the ones it may act on.

Prompts, cancels, setting changes and closes name a session; only one this
connection holds is served, so a client cannot steer another client's session
by guessing its id. Handlers run on the connection's reader and on the threads
that open sessions with MCP servers, hence the lock.
"""

from __future__ import annotations

import threading
from typing import Any

from toolprep.runtime.acp.errors import RpcError, require
from toolprep.runtime.acp.session_errors import SESSION_NOT_FOUND

__all__ = ["ConnectionSessions"]


class ConnectionSessions:
    """A thread-safe set of session ids, and the check every session request makes."""

    def __init__(self) -> None:
        self._sessions: set[str] = set()
        self._lock = threading.Lock()

    def add(self, session_id: str) -> None:
        with self._lock:
            self._sessions.add(session_id)

    def discard(self, session_id: str) -> None:
        with self._lock:
            self._sessions.discard(session_id)

    def __contains__(self, session_id: object) -> bool:
        with self._lock:
            return session_id in self._sessions

    def named(self, params: Any) -> str:
        """The session a request names, if this connection opened it."""
        session_id = require(params, "sessionId", str)
        with self._lock:
            if session_id not in self._sessions:
                raise RpcError(SESSION_NOT_FOUND, f"Session not found: {session_id}")
        return session_id
