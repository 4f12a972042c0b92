"""The sink one ACP connection gives the host: sessions' frames and requests go to the client.

Frames become ``session/update`` notifications (a prompt's own record is dropped, see
``OwnPrompts``); requests a session sends (permission, editor file access) become
JSON-RPC requests to the client, and the client's replies go back to the host as answers
quoting the request id.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any, assert_never

import orjson

from toolprep.messages.permissions import SELECTABLE_OUTCOMES, PermissionOutcome, check_outcome
from toolprep.runtime.acp.errors import REQUEST_CANCELLED, ConnectionClosed, RpcError
from toolprep.runtime.acp.jsonrpc_connection import JsonRpcConnection, OversizedMessage
from toolprep.runtime.acp.own_prompts import OwnPrompts
from toolprep.runtime.kernel.session_host import (
    ClientRequest,
    EditorAnswer,
    EditorFailed,
    FileRead,
    FileWritten,
    ReadTextFile,
    RequestPermission,
    SessionHost,
    UnknownSession,
    WriteTextFile,
)

__all__ = ["PERMISSION_OPTIONS", "ConnectionSink"]

logger = logging.getLogger(__name__)

PERMISSION_OPTIONS = [
    {"optionId": "allow_once", "name": "Allow", "kind": "allow_once"},
    {"optionId": "allow_always", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"},
]


class ConnectionSink:
    """Writes sessions' frames and requests to the client; the client's replies go to the host.

    One sink serves every session of the connection: each call names its
    session, and the connection serialises writes from any thread.
    """

    def __init__(self, connection: JsonRpcConnection, host: SessionHost) -> None:
        self._connection = connection
        self._host = host
        self.own_prompts = OwnPrompts()
        self._asked: dict[tuple[str, str], Future[Any]] = {}
        self._asked_lock = threading.Lock()

    @property
    def connection(self) -> JsonRpcConnection:
        return self._connection

    def send_update(self, session_id: str, update: dict[str, Any]) -> None:
        if self.own_prompts.is_echo(session_id, update):
            return
        self._connection.notify("session/update", {"sessionId": session_id, "update": update})

    def send_updates(self, frames: Sequence[tuple[str, dict[str, Any]]]) -> None:
        """Several sessions' frames, in order, in one write (see ``UpdateSink``)."""
        is_echo = self.own_prompts.is_echo
        self._connection.notify_many(
            "session/update",
            [{"sessionId": s, "update": u} for s, u in frames if not is_echo(s, u)],
        )

    def wait_for_room(self, nbytes: int, timeout: float) -> bool:
        """True once a frame of ``nbytes`` can be sent without overflowing the connection's
        buffer (for a replay, which may wait for its client; live frames never do)."""
        return self._connection.wait_for_room(nbytes, timeout)

    def send_encoded_update(self, session_id: str, update_json: bytes) -> None:
        if self.own_prompts.is_encoded_echo(session_id, update_json):
            return
        # A Fragment is written as it is: the frame is not decoded and encoded again.
        update = orjson.Fragment(update_json)
        self._connection.notify("session/update", {"sessionId": session_id, "update": update})

    def send_request(self, session_id: str, request: ClientRequest) -> None:
        match request:
            case RequestPermission():
                self._ask_permission(session_id, request)
            case ReadTextFile(path=path, line=line, limit=limit):
                params: dict[str, Any] = {"path": path}
                if line is not None:
                    params["line"] = line
                if limit is not None:
                    params["limit"] = limit
                self._ask_editor(session_id, request.request_id, "fs/read_text_file", params)
            case WriteTextFile(path=path, content=content):
                params = {"path": path, "content": content}
                self._ask_editor(session_id, request.request_id, "fs/write_text_file", params)
            case _:
                assert_never(request)

    def _ask_permission(self, session_id: str, request: RequestPermission) -> None:
        asked = self._connection.request(
            "session/request_permission",
            {
                "sessionId": session_id,
                "toolCall": request.tool_call,
                "options": PERMISSION_OPTIONS,
            },
        )

        key = (session_id, request.request_id)
        with self._asked_lock:
            self._asked[key] = asked

        def relay(done: Future[Any]) -> None:
            with self._asked_lock:
                self._asked.pop(key, None)
            try:
                outcome = _permission_outcome(done.result())
            except ConnectionClosed:
                # Not an answer: the session settles it when it closes, or another
                # client attached to it answers.
                return
            except RpcError as exc:
                if exc.code == REQUEST_CANCELLED:
                    return  # withdrawn: answered elsewhere
                logger.warning("permission request failed: %r", exc)
                outcome = "cancelled"
            except Exception as exc:
                logger.warning("permission request failed: %r", exc)
                outcome = "cancelled"
            self._answer(session_id, request.request_id, outcome)

        asked.add_done_callback(relay)

    def withdraw_request(self, session_id: str, request_id: str, reason: str) -> None:
        """Take back a permission request this client has not answered (``$/cancel_request``)."""
        with self._asked_lock:
            asked = self._asked.pop((session_id, request_id), None)
        if asked is not None:
            self._connection.withdraw(asked, reason)

    def _answer(self, session_id: str, request_id: str, outcome: PermissionOutcome) -> None:
        try:
            self._host.answer_permission(session_id, request_id, outcome)
        except UnknownSession:
            logger.info("permission answer for closed session %s dropped", session_id)

    def _ask_editor(
        self, session_id: str, request_id: str, method: str, params: dict[str, Any]
    ) -> None:
        asked = self._connection.request(method, {"sessionId": session_id, **params})

        def relay(done: Future[Any]) -> None:
            answer = _editor_answer(method, done)
            try:
                self._host.answer_editor(session_id, request_id, answer)
            except UnknownSession:
                logger.info("%s answer for closed session %s dropped", method, session_id)

        asked.add_done_callback(relay)


def _editor_answer(method: str, done: Future[Any]) -> EditorAnswer:
    """The client's reply to an ``fs/*`` request, as the answer the session's tool gets.

    A file's text comes back as one JSON-RPC line, so a file near the
    connection's line limit cannot come through; the connection fails such a
    reply at once and the tool says so, rather than waiting out the timeout.
    """
    try:
        result = done.result()
    except RpcError as exc:
        return EditorFailed(f"the editor could not {method.split('/')[-1]}: {exc.message}")
    except OversizedMessage as exc:
        return EditorFailed(
            f"file too large for the editor channel ({exc.excess} bytes over the "
            f"{exc.limit}-byte limit); read it in parts with offset and limit"
        )
    except Exception as exc:
        return EditorFailed(f"the editor did not answer {method}: {exc!r}")
    if method == "fs/write_text_file":
        return FileWritten()
    content = result.get("content") if isinstance(result, dict) else None
    if not isinstance(content, str):
        return EditorFailed("the editor answered fs/read_text_file without text content")
    return FileRead(content)


def _permission_outcome(result: Any) -> PermissionOutcome:
    outcome = result.get("outcome") if isinstance(result, dict) else None
    if not isinstance(outcome, dict) or outcome.get("outcome") != "selected":
        return "cancelled"
    option = outcome.get("optionId")
    if isinstance(option, str) and option in SELECTABLE_OUTCOMES:
        return check_outcome(option)
    return "reject_once"
