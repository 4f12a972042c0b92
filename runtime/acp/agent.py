"""The ACP agent: JSON-RPC methods on one side, a ``SessionHost`` on the other.

The agent reaches sessions only through the session-host boundary, so the
same agent fronts sessions in this process or elsewhere. It wires one
connection's handlers to the parts that serve them, each in a module of its
own: ``initialize`` (``capabilities``), the session methods
(``session_lifecycle``), the settings (``session_settings``), prompts and
cancels (``prompt_turns``), and the sink that carries the sessions' frames and
requests to the client (``connection_sink``). Each ``session/prompt`` is
answered later, when the host resolves the turn; the connection keeps reading
in the meantime, so ``session/cancel`` and other sessions' requests are served
while turns run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from toolprep.runtime.acp.capabilities import editor_capabilities, initialize_result
from toolprep.runtime.acp.connection_sessions import ConnectionSessions
from toolprep.runtime.acp.connection_sink import ConnectionSink
from toolprep.runtime.acp.errors import require
from toolprep.runtime.acp.jsonrpc_connection import JsonRpcConnection
from toolprep.runtime.acp.prompt_turns import PromptTurns
from toolprep.runtime.acp.session_lifecycle import SessionLifecycle
from toolprep.runtime.acp.session_settings import SessionSettings
from toolprep.runtime.kernel.session_host import EditorCapabilities, SessionArchive, SessionHost

__all__ = ["AcpAgent"]

logger = logging.getLogger(__name__)

_STOP_POLL_S = 0.1


class AcpAgent:
    """``archive``, when the host keeps sessions (``--data-dir``), adds ``session/load``,
    ``session/list`` and ``session/delete``."""

    def __init__(
        self,
        host: SessionHost,
        connection: JsonRpcConnection,
        archive: SessionArchive | None = None,
        *,
        meta: Mapping[str, object] | None = None,
    ) -> None:
        """``meta``: what ``initialize`` says under ``_meta.toolprep`` (the sandbox)."""
        self.host = host
        self.meta = dict(meta or {})
        self.archive = archive
        self.connection = connection
        self.client_capabilities: dict[str, Any] = {}
        sink = ConnectionSink(connection, host)
        sessions = ConnectionSessions()
        lifecycle = SessionLifecycle(host, archive, sink, sessions, self._editor)
        settings = SessionSettings(host, sessions)
        turns = PromptTurns(host, connection, sink, sessions)
        connection.on_request("initialize", self.initialize)
        connection.on_request("authenticate", self.authenticate)
        connection.on_request("session/new", lifecycle.new_session)
        connection.on_request("session/prompt", turns.prompt)
        connection.on_notification("session/cancel", turns.cancel)
        connection.on_request("session/close", lifecycle.close_session)
        connection.on_request("session/set_config_option", settings.set_config_option)
        connection.on_request("session/set_mode", settings.set_mode)
        if archive is not None:
            connection.on_request("session/load", lifecycle.load_session)
            connection.on_request("session/resume", lifecycle.resume_session)
            connection.on_request("session/list", lifecycle.list_sessions)
            connection.on_request("session/delete", lifecycle.delete_session)

    def initialize(self, params: Any, request_id: Any = None) -> dict[str, Any]:
        require(params, "protocolVersion", int)
        capabilities = params.get("clientCapabilities")
        self.client_capabilities = capabilities if isinstance(capabilities, dict) else {}
        return initialize_result(keeps_sessions=self.archive is not None, meta=self.meta)

    def authenticate(self, params: Any, request_id: Any = None) -> dict[str, Any]:
        return {}

    def _editor(self) -> EditorCapabilities:
        return editor_capabilities(self.client_capabilities)

    def serve(self, stop_requested: Callable[[], bool]) -> None:
        """Serve until the input ends or ``stop_requested()``, then end everything.

        Both ways out take the same path, so a stop signal leaves the client
        with what stdin EOF would: every prompt answered and every card
        terminal. The loop polls rather than being woken by the signal
        handler, which must not touch locks the main thread may hold.
        """
        self.connection.start()
        while not self.connection.wait_closed(_STOP_POLL_S):
            if stop_requested():
                logger.info("stop requested: ending the running turns")
                break
        self.close()
        self.connection.close()

    def close(self) -> None:
        """Input ended or a stop was requested: cancel running turns (their cards are
        discarded, their prompts answered ``cancelled``), stop tool processes and roles."""
        self.host.shutdown()
