"""Sessions opened, reopened, listed, closed and deleted over ACP.

``session/new`` opens a session on the host; with an archive (the host keeps
sessions), ``session/load`` reopens a stored one replaying what it sent,
``session/resume`` reopens one without replaying it, and ``session/list`` and
``session/delete`` read and prune the store. A session opened or reopened here
joins the connection's sessions, so its prompts are served.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from toolprep.messages.frames import iso8601
from toolprep.runtime.acp.connection_sessions import ConnectionSessions
from toolprep.runtime.acp.connection_sink import ConnectionSink
from toolprep.runtime.acp.errors import INVALID_PARAMS, RpcError, require
from toolprep.runtime.acp.session_errors import (
    SESSION_NOT_FOUND,
    in_use,
    no_worker,
    read_only,
    session_limit,
)
from toolprep.runtime.acp.session_params import after_seq, session_directory
from toolprep.runtime.acp.session_settings import settings_of
from toolprep.runtime.kernel.session_host import (
    EditorCapabilities,
    NoWorkerAvailable,
    SessionArchive,
    SessionHost,
    SessionLimitReached,
    SessionServedElsewhere,
    StoreReadOnly,
    UnknownSession,
)
from toolprep.runtime.mcp.policy import McpRefused
from toolprep.runtime.mcp.specs import McpServerSpec

__all__ = ["SessionLifecycle", "answer_in_background"]


def answer_in_background(
    servers: tuple[McpServerSpec, ...], open_session: Callable[[], dict[str, Any]]
) -> dict[str, Any] | Future[dict[str, Any]]:
    """Open a session at once, or on a thread of its own when it starts MCP servers.

    Starting servers can take seconds; meanwhile the connection must go on
    reading, so a cancel or another session's prompt is not held up behind it.
    """
    if not servers:
        return open_session()
    answer: Future[dict[str, Any]] = Future()

    def run() -> None:
        try:
            answer.set_result(open_session())
        except BaseException as exc:  # the connection answers with it
            answer.set_exception(exc)

    threading.Thread(target=run, name="toolprep-session-open", daemon=True).start()
    return answer


class SessionLifecycle:
    """The handlers of the session methods; ``archive`` is needed by those that read the store.

    ``editor`` says, at each open, which ``fs/*`` requests the client answers
    (known once it has sent ``initialize``).
    """

    def __init__(
        self,
        host: SessionHost,
        archive: SessionArchive | None,
        sink: ConnectionSink,
        sessions: ConnectionSessions,
        editor: Callable[[], EditorCapabilities],
    ) -> None:
        self._host = host
        self._archive = archive
        self._sink = sink
        self._sessions = sessions
        self._editor = editor

    def new_session(self, params: Any, request_id: Any = None) -> Any:
        cwd, servers = session_directory(params)
        return answer_in_background(servers, lambda: self._open_new(cwd, servers))

    def _open_new(self, cwd: str, servers: tuple[McpServerSpec, ...]) -> dict[str, Any]:
        try:
            session_id = self._host.open_session(
                cwd,
                self._sink,
                f"sess_{uuid.uuid4().hex}",
                editor=self._editor(),
                mcp_servers=servers,
            )
        except SessionLimitReached as exc:
            raise session_limit(exc) from None
        except NoWorkerAvailable as exc:
            raise no_worker(exc) from None
        except McpRefused as exc:
            raise RpcError(INVALID_PARAMS, f"Invalid params: {exc}") from None
        except StoreReadOnly as exc:
            raise read_only(exc) from None
        self._sessions.add(session_id)
        return {"sessionId": session_id, **self._settings(session_id)}

    def _settings(self, session_id: str) -> dict[str, Any]:
        """``modes`` and ``configOptions``, as session/new, load and resume answer.

        Asked of the process serving the session, which may have died since it opened
        the session: that is refused as any call to a session waiting for its worker.
        """
        try:
            return settings_of(self._host.session_config(session_id))
        except NoWorkerAvailable as exc:
            raise no_worker(exc) from None

    def load_session(self, params: Any, request_id: Any = None) -> Any:
        """Open a stored session, replaying what it sent before as ``session/update``s."""
        return self._reopen(params, replay=True)

    def resume_session(self, params: Any, request_id: Any = None) -> Any:
        """Open a stored session without replaying it (the client still shows it)."""
        return self._reopen(params, replay=False)

    def _reopen(self, params: Any, *, replay: bool) -> Any:
        session_id = require(params, "sessionId", str)
        _cwd, servers = session_directory(params)
        after = after_seq(params)
        return answer_in_background(
            servers, lambda: self._reopen_checked(session_id, servers, replay, after)
        )

    def _reopen_checked(
        self,
        session_id: str,
        servers: tuple[McpServerSpec, ...],
        replay: bool,
        after_seq: int = 0,
    ) -> dict[str, Any]:
        assert self._archive is not None
        try:
            self._archive.load_session(
                session_id,
                self._sink,
                editor=self._editor(),
                replay=replay,
                mcp_servers=servers,
                after_seq=after_seq,
            )
        except UnknownSession as exc:
            raise RpcError(SESSION_NOT_FOUND, str(exc)) from None
        except SessionLimitReached as exc:
            raise session_limit(exc) from None
        except SessionServedElsewhere as exc:
            raise in_use(exc) from None
        except NoWorkerAvailable as exc:
            raise no_worker(exc) from None
        except ValueError as exc:
            raise RpcError(INVALID_PARAMS, f"Invalid params: {exc}") from None
        self._sessions.add(session_id)
        return self._settings(session_id)

    def close_session(self, params: Any, request_id: Any = None) -> dict[str, Any]:
        """End the session's running turn (its prompt answers ``cancelled``) and close it."""
        session_id = self._sessions.named(params)
        self._sessions.discard(session_id)
        try:
            self._host.close_session(session_id)
        except UnknownSession as exc:
            raise RpcError(SESSION_NOT_FOUND, str(exc)) from None
        return {}

    def list_sessions(self, params: Any, request_id: Any = None) -> dict[str, Any]:
        assert self._archive is not None
        params = params if isinstance(params, dict) else {}
        cwd, cursor = params.get("cwd"), params.get("cursor")
        for name, value in (("cwd", cwd), ("cursor", cursor)):
            if value is not None and not isinstance(value, str):
                raise RpcError(INVALID_PARAMS, f"Invalid params: '{name}' must be a string")
        try:
            infos, next_cursor = self._archive.list_sessions(cwd, cursor)
        except ValueError as exc:
            raise RpcError(INVALID_PARAMS, f"Invalid params: {exc}") from None
        sessions = [
            {
                "sessionId": info.session_id,
                "cwd": info.cwd,
                "title": info.title,
                "updatedAt": iso8601(info.updated_at),
            }
            for info in infos
        ]
        return {"sessions": sessions, "nextCursor": next_cursor}

    def delete_session(self, params: Any, request_id: Any = None) -> dict[str, Any]:
        assert self._archive is not None
        session_id = require(params, "sessionId", str)
        # Deleting is idempotent: an id nothing holds (never used, or deleted) is gone already.
        try:
            self._archive.delete_session(session_id)
        except UnknownSession:
            pass
        except SessionServedElsewhere as exc:
            raise in_use(exc) from None
        self._sessions.discard(session_id)
        return {}
