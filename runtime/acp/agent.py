"""The ACP agent: JSON-RPC methods on one side, the session host on the other.

Each ``session/prompt`` is answered later, from the emitter's thread, once
every frame of the turn has been written: the connection keeps reading in
the meantime, so ``session/cancel`` and other sessions' requests are served
while turns run.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from importlib import metadata
from typing import Any

from toolprep.messages.turns import TurnResult
from toolprep.runtime.acp.errors import INVALID_PARAMS, RpcError, require
from toolprep.runtime.acp.jsonrpc import DEFERRED, JsonRpcConnection, OversizedMessage
from toolprep.runtime.acp.prompt_content import prompt_to_parts
from toolprep.runtime.host import Runtime
from toolprep.runtime.tools.base import PermissionOutcome, ToolError

logger = logging.getLogger(__name__)

PROTOCOL_VERSION = 1

PERMISSION_OPTIONS = [
    {"optionId": "allow_once", "name": "Allow", "kind": "allow_once"},
    {"optionId": "allow_always", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"},
]

SESSION_NOT_FOUND = -32002

_STOP_POLL_S = 0.1


def _version() -> str:
    try:
        return metadata.version("toolprep")
    except metadata.PackageNotFoundError:
        return "0.0.0"


class ConnectionSink:
    """Writes one session's frames and permission requests to the client."""

    def __init__(self, connection: JsonRpcConnection) -> None:
        self._connection = connection

    def send_update(self, session_id: str, update: dict[str, Any]) -> None:
        self._connection.notify("session/update", {"sessionId": session_id, "update": update})

    def request_permission(
        self, session_id: str, tool_call: dict[str, Any], request: Any
    ) -> Future[str]:
        asked = self._connection.request(
            "session/request_permission",
            {"sessionId": session_id, "toolCall": tool_call, "options": PERMISSION_OPTIONS},
        )
        answer: Future[str] = Future()

        def relay(done: Future[Any]) -> None:
            try:
                answer.set_result(_permission_outcome(done.result()))
            except Exception as exc:
                logger.warning("permission request failed: %r", exc)
                answer.set_result("cancelled")

        asked.add_done_callback(relay)
        return answer


class ConnectionFilesystem:
    """File tools through the editor's ``fs/read_text_file`` / ``fs/write_text_file``.

    A file's text comes back as one JSON-RPC line, so a file near the
    connection's line limit cannot come through; the connection fails such a
    reply at once and the tool says so, rather than waiting out the timeout.
    """

    def __init__(
        self,
        connection: JsonRpcConnection,
        session_id: str,
        *,
        can_read: bool,
        can_write: bool,
        timeout: float = 30.0,
    ) -> None:
        self._connection = connection
        self._session_id = session_id
        self.can_read = can_read
        self.can_write = can_write
        self._timeout = timeout

    def _call(self, method: str, params: dict[str, Any]) -> Any:
        try:
            return self._connection.request(
                method, {"sessionId": self._session_id, **params}
            ).result(timeout=self._timeout)
        except RpcError as exc:
            raise ToolError(
                f"the editor could not {method.split('/')[-1]}: {exc.message}"
            ) from None
        except OversizedMessage as exc:
            raise ToolError(
                f"file too large for the editor channel ({exc.excess} bytes over the "
                f"{exc.limit}-byte limit); read it in parts with offset and limit"
            ) from None
        except Exception as exc:
            raise ToolError(f"the editor did not answer {method}: {exc!r}") from None

    def read_text_file(self, path: str, line: int | None = None, limit: int | None = None) -> str:
        params: dict[str, Any] = {"path": path}
        if line is not None:
            params["line"] = line
        if limit is not None:
            params["limit"] = limit
        result = self._call("fs/read_text_file", params)
        content = result.get("content") if isinstance(result, dict) else None
        if not isinstance(content, str):
            raise ToolError("the editor answered fs/read_text_file without text content")
        return content

    def write_text_file(self, path: str, content: str) -> None:
        self._call("fs/write_text_file", {"path": path, "content": content})


def _permission_outcome(result: Any) -> PermissionOutcome:
    outcome = result.get("outcome") if isinstance(result, dict) else None
    if not isinstance(outcome, dict) or outcome.get("outcome") != "selected":
        return "cancelled"
    option = outcome.get("optionId")
    if option in ("allow_once", "allow_always", "reject_once", "reject_always"):
        return option  # type: ignore[no-any-return]
    return "reject_once"


class AcpAgent:
    def __init__(self, runtime: Runtime, connection: JsonRpcConnection) -> None:
        self.runtime = runtime
        self.connection = connection
        self.client_capabilities: dict[str, Any] = {}
        self._sink = ConnectionSink(connection)
        connection.on_request("initialize", self.initialize)
        connection.on_request("authenticate", self.authenticate)
        connection.on_request("session/new", self.new_session)
        connection.on_request("session/prompt", self.prompt)
        connection.on_notification("session/cancel", self.cancel)

    def initialize(self, params: Any, request_id: Any = None) -> dict[str, Any]:
        require(params, "protocolVersion", int)
        capabilities = params.get("clientCapabilities")
        self.client_capabilities = capabilities if isinstance(capabilities, dict) else {}
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": False,
                "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
                "mcpCapabilities": {"http": False, "sse": False},
            },
            "authMethods": [],
            "agentInfo": {"name": "toolprep", "title": "toolprep", "version": _version()},
        }

    def authenticate(self, params: Any, request_id: Any = None) -> dict[str, Any]:
        return {}

    def new_session(self, params: Any, request_id: Any = None) -> dict[str, Any]:
        cwd = require(params, "cwd", str)
        if not os.path.isabs(cwd):
            raise RpcError(INVALID_PARAMS, "Invalid params: 'cwd' must be an absolute path")
        if not os.path.isdir(cwd):
            raise RpcError(INVALID_PARAMS, f"Invalid params: 'cwd' is not a directory: {cwd}")
        servers = params.get("mcpServers", [])
        if not isinstance(servers, list):
            raise RpcError(INVALID_PARAMS, "Invalid params: 'mcpServers' must be an array")
        session_id = f"sess_{uuid.uuid4().hex}"
        fs_caps = self.client_capabilities.get("fs")
        fs_caps = fs_caps if isinstance(fs_caps, dict) else {}
        client_fs = None
        if fs_caps.get("readTextFile") is True or fs_caps.get("writeTextFile") is True:
            client_fs = ConnectionFilesystem(
                self.connection,
                session_id,
                can_read=fs_caps.get("readTextFile") is True,
                can_write=fs_caps.get("writeTextFile") is True,
            )
        self.runtime.open_session(cwd, self._sink, session_id, client_fs=client_fs)
        return {"sessionId": session_id}

    def _session(self, params: Any) -> str:
        session_id = require(params, "sessionId", str)
        if not self.runtime.has_session(session_id):
            raise RpcError(SESSION_NOT_FOUND, f"Session not found: {session_id}")
        return session_id

    def prompt(self, params: Any, request_id: Any = None) -> Any:
        session_id = self._session(params)
        parts = prompt_to_parts(params.get("prompt"))
        reply = self.runtime.prompt(session_id, parts)
        connection = self.connection

        def respond(done: Future[TurnResult]) -> None:
            try:
                result = done.result()
            except Exception as exc:  # the turn machinery itself failed
                connection.respond_error(request_id, -32603, f"Internal error: {exc!r}")
                return
            if result.stop_reason is None:
                connection.respond_error(request_id, -32603, result.error or "Turn failed")
                return
            body: dict[str, Any] = {"stopReason": result.stop_reason}
            if result.usage is not None:
                body["_meta"] = {
                    "usage": {
                        "inputTokens": result.usage.input_tokens,
                        "outputTokens": result.usage.output_tokens,
                    }
                }
            connection.respond(request_id, body)

        reply.add_done_callback(respond)
        return DEFERRED

    def cancel(self, params: Any) -> None:
        if not isinstance(params, dict) or not isinstance(params.get("sessionId"), str):
            logger.warning("session/cancel without a string sessionId ignored")
            return
        self.runtime.cancel(params["sessionId"])

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
                logger.info(
                    "stop requested: ending %d running turns", len(self.runtime.active_turns())
                )
                break
        self.close()
        self.connection.close()

    def close(self) -> None:
        """Input ended or a stop was requested: cancel running turns (their cards are
        discarded, their prompts answered ``cancelled``), stop tool processes and roles."""
        self.runtime.shutdown()
