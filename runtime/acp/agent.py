"""The ACP agent: JSON-RPC methods on one side, a ``SessionHost`` on the other.

The agent reaches sessions only through the session-host boundary, so the
same agent fronts sessions in this process or elsewhere. Each
``session/prompt`` is answered later, when the host resolves the turn, which
it does only after every frame of the turn was handed to the sink: the
connection keeps reading in the meantime, so ``session/cancel`` and other
sessions' requests are served while turns run. Requests a session sends
(permission, editor file access) become JSON-RPC requests to the client, and
the client's replies go back to the host as answers quoting the request id.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from importlib import metadata
from typing import Any, assert_never

import orjson

from toolprep.messages.frames import META_KEY, MODEL_OPTION, iso8601, session_options
from toolprep.messages.modes import MODE_OPTION, MODES, UnknownMode, check_mode, mode_state
from toolprep.messages.permissions import SELECTABLE_OUTCOMES, PermissionOutcome, check_outcome
from toolprep.messages.turns import TurnResult, UserMessage
from toolprep.runtime.acp.errors import (
    INVALID_PARAMS,
    MODEL_REQUEST_FAILED,
    REQUEST_CANCELLED,
    ConnectionClosed,
    RpcError,
    require,
)
from toolprep.runtime.acp.jsonrpc_connection import JsonRpcConnection, OversizedMessage
from toolprep.runtime.acp.jsonrpc_router import DEFERRED
from toolprep.runtime.acp.own_prompts import OwnPrompts
from toolprep.runtime.acp.prompt_content import parse_prompt
from toolprep.runtime.kernel.session_host import (
    ClientRequest,
    EditorAnswer,
    EditorCapabilities,
    EditorFailed,
    FileRead,
    FileWritten,
    NoWorkerAvailable,
    ReadTextFile,
    RequestPermission,
    SessionArchive,
    SessionConfig,
    SessionHost,
    SessionLimitReached,
    SessionServedElsewhere,
    StoreReadOnly,
    UnknownModel,
    UnknownSession,
    WriteTextFile,
)
from toolprep.runtime.mcp.policy import McpRefused
from toolprep.runtime.mcp.specs import McpServerSpec, parse_servers

logger = logging.getLogger(__name__)

PROTOCOL_VERSION = 1

PERMISSION_OPTIONS = [
    {"optionId": "allow_once", "name": "Allow", "kind": "allow_once"},
    {"optionId": "allow_always", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"},
]

SESSION_NOT_FOUND = -32002
SESSION_LIMIT = -32001
"""A server error (the -32000 range JSON-RPC leaves to servers): no room for another session."""
SESSION_IN_USE = -32003
"""A server error: another live toolprep process serves the session (``data.holder`` names it)."""
STORE_READ_ONLY = -32004
"""A server error: the session store cannot be written, so no session or turn starts
(``data.cause`` says why); listing and loading sessions still work."""
NO_WORKER = -32005
"""A server error: every worker process is down, waiting to restart (``data.retryAfter``
says in how many seconds the first starts again)."""

_STOP_POLL_S = 0.1


def _version() -> str:
    try:
        return metadata.version("toolprep")
    except metadata.PackageNotFoundError:
        return "0.0.0"


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


def _in_use(exc: SessionServedElsewhere) -> RpcError:
    return RpcError(SESSION_IN_USE, str(exc), {"sessionId": exc.session_id, "holder": exc.holder})


def _read_only(exc: StoreReadOnly) -> RpcError:
    return RpcError(STORE_READ_ONLY, str(exc), {"cause": exc.cause})


def _no_worker(exc: NoWorkerAvailable) -> RpcError:
    return RpcError(NO_WORKER, str(exc), {"retryAfter": math.ceil(exc.retry_after)})


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


def _session_directory(params: Any) -> tuple[str, tuple[McpServerSpec, ...]]:
    """The ``cwd`` of ``session/new`` or ``session/load`` (an absolute, existing
    directory) and the MCP servers to run for the session.

    A malformed server entry is refused with ``-32602`` naming the field; a
    well-formed one that fails to start does not fail the request (see
    ``SessionHost.open_session``).
    """
    cwd = require(params, "cwd", str)
    if not os.path.isabs(cwd):
        raise RpcError(INVALID_PARAMS, "Invalid params: 'cwd' must be an absolute path")
    if not os.path.isdir(cwd):
        raise RpcError(INVALID_PARAMS, f"Invalid params: 'cwd' is not a directory: {cwd}")
    try:
        servers = parse_servers(params.get("mcpServers"))
    except ValueError as exc:
        raise RpcError(INVALID_PARAMS, f"Invalid params: {exc}") from None
    return cwd, servers


def _after_seq(params: Any) -> int:
    """``_meta.toolprep.afterSeq`` of ``session/load``: the number of the last frame the
    client has (each ``session/update`` carries its number as ``_meta.toolprep.seq``); the
    replay sends only the frames after it. 0, or absent: the whole session."""
    meta = params.get("_meta")
    ours = meta.get(META_KEY) if isinstance(meta, dict) else None
    if ours is None:
        return 0
    after = ours.get("afterSeq", 0) if isinstance(ours, dict) else None
    if not isinstance(after, int) or isinstance(after, bool) or after < 0:
        raise RpcError(
            INVALID_PARAMS,
            f"Invalid params: '_meta.{META_KEY}.afterSeq' must be a frame number (an integer "
            f">= 0), not {after!r}",
        )
    return after


def _answer_in_background(
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


def _settings_of(config: SessionConfig) -> dict[str, Any]:
    return {
        "modes": mode_state(config.mode),
        "configOptions": session_options(config.model, config.models, config.mode),
    }


def _permission_outcome(result: Any) -> PermissionOutcome:
    outcome = result.get("outcome") if isinstance(result, dict) else None
    if not isinstance(outcome, dict) or outcome.get("outcome") != "selected":
        return "cancelled"
    option = outcome.get("optionId")
    if isinstance(option, str) and option in SELECTABLE_OUTCOMES:
        return check_outcome(option)
    return "reject_once"


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
        self._sink = ConnectionSink(connection, host)
        self._sessions: set[str] = set()
        self._lock = threading.Lock()
        connection.on_request("initialize", self.initialize)
        connection.on_request("authenticate", self.authenticate)
        connection.on_request("session/new", self.new_session)
        connection.on_request("session/prompt", self.prompt)
        connection.on_notification("session/cancel", self.cancel)
        connection.on_request("session/close", self.close_session)
        connection.on_request("session/set_config_option", self.set_config_option)
        connection.on_request("session/set_mode", self.set_mode)
        if archive is not None:
            connection.on_request("session/load", self.load_session)
            connection.on_request("session/resume", self.resume_session)
            connection.on_request("session/list", self.list_sessions)
            connection.on_request("session/delete", self.delete_session)

    def initialize(self, params: Any, request_id: Any = None) -> dict[str, Any]:
        require(params, "protocolVersion", int)
        capabilities = params.get("clientCapabilities")
        self.client_capabilities = capabilities if isinstance(capabilities, dict) else {}
        result: dict[str, Any] = {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": self.archive is not None,
                "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
                "mcpCapabilities": {"http": True, "sse": True},
                "sessionCapabilities": (
                    {"close": {}, "list": {}, "delete": {}, "resume": {}}
                    if self.archive is not None
                    else {"close": {}}
                ),
            },
            "authMethods": [],
            "agentInfo": {"name": "toolprep", "title": "toolprep", "version": _version()},
        }
        if self.meta:
            result["_meta"] = {META_KEY: self.meta}
        return result

    def authenticate(self, params: Any, request_id: Any = None) -> dict[str, Any]:
        return {}

    def new_session(self, params: Any, request_id: Any = None) -> Any:
        cwd, servers = _session_directory(params)
        return _answer_in_background(servers, lambda: self._open_new(cwd, servers))

    def _open_new(self, cwd: str, servers: tuple[McpServerSpec, ...]) -> dict[str, Any]:
        try:
            session_id = self.host.open_session(
                cwd,
                self._sink,
                f"sess_{uuid.uuid4().hex}",
                editor=self._editor(),
                mcp_servers=servers,
            )
        except SessionLimitReached as exc:
            raise RpcError(SESSION_LIMIT, str(exc), {"maxSessions": exc.limit}) from None
        except NoWorkerAvailable as exc:
            raise _no_worker(exc) from None
        except McpRefused as exc:
            raise RpcError(INVALID_PARAMS, f"Invalid params: {exc}") from None
        except StoreReadOnly as exc:
            raise _read_only(exc) from None
        with self._lock:
            self._sessions.add(session_id)
        return {"sessionId": session_id, **self._settings(session_id)}

    def _settings(self, session_id: str) -> dict[str, Any]:
        """``modes`` and ``configOptions``, as session/new, load and resume answer."""
        return _settings_of(self.host.session_config(session_id))

    def _editor(self) -> EditorCapabilities:
        fs_caps = self.client_capabilities.get("fs")
        fs_caps = fs_caps if isinstance(fs_caps, dict) else {}
        return EditorCapabilities(
            read_text_file=fs_caps.get("readTextFile") is True,
            write_text_file=fs_caps.get("writeTextFile") is True,
        )

    def load_session(self, params: Any, request_id: Any = None) -> Any:
        """Open a stored session, replaying what it sent before as ``session/update``s."""
        return self._reopen(params, replay=True)

    def resume_session(self, params: Any, request_id: Any = None) -> Any:
        """Open a stored session without replaying it (the client still shows it)."""
        return self._reopen(params, replay=False)

    def _reopen(self, params: Any, *, replay: bool) -> Any:
        session_id = require(params, "sessionId", str)
        _cwd, servers = _session_directory(params)
        after_seq = _after_seq(params)
        return _answer_in_background(
            servers, lambda: self._reopen_checked(session_id, servers, replay, after_seq)
        )

    def _reopen_checked(
        self,
        session_id: str,
        servers: tuple[McpServerSpec, ...],
        replay: bool,
        after_seq: int = 0,
    ) -> dict[str, Any]:
        assert self.archive is not None
        try:
            self.archive.load_session(
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
            raise RpcError(SESSION_LIMIT, str(exc), {"maxSessions": exc.limit}) from None
        except SessionServedElsewhere as exc:
            raise _in_use(exc) from None
        except NoWorkerAvailable as exc:
            raise _no_worker(exc) from None
        except ValueError as exc:
            raise RpcError(INVALID_PARAMS, f"Invalid params: {exc}") from None
        with self._lock:
            self._sessions.add(session_id)
        return self._settings(session_id)

    def set_config_option(self, params: Any, request_id: Any = None) -> dict[str, Any]:
        """Change a session setting: the model (``configId`` ``"model"``) or the mode
        (``"mode"``, as ``session/set_mode`` does)."""
        session_id = self._session(params)
        config_id = require(params, "configId", str)
        if config_id not in (MODEL_OPTION, MODE_OPTION):
            raise RpcError(
                INVALID_PARAMS,
                f"Invalid params: unknown config option {config_id!r}; "
                f"this agent offers {MODEL_OPTION!r} and {MODE_OPTION!r}",
            )
        if params.get("type", "value_id") != "value_id":
            raise RpcError(
                INVALID_PARAMS, f"Invalid params: the {config_id} option takes a value id"
            )
        value = require(params, "value", str)
        if config_id == MODE_OPTION:
            config = self._set_mode(session_id, value)
        else:
            try:
                config = self.host.set_model(session_id, value)
            except UnknownSession as exc:
                raise RpcError(SESSION_NOT_FOUND, str(exc)) from None
            except UnknownModel as exc:
                raise RpcError(
                    INVALID_PARAMS, f"Invalid params: {exc}", {"models": list(exc.models)}
                ) from None
        return {"configOptions": _settings_of(config)["configOptions"]}

    def set_mode(self, params: Any, request_id: Any = None) -> dict[str, Any]:
        """Change the session's mode; every client attached hears ``current_mode_update``."""
        session_id = self._session(params)
        self._set_mode(session_id, require(params, "modeId", str))
        return {}

    def _set_mode(self, session_id: str, value: str) -> SessionConfig:
        try:
            return self.host.set_mode(session_id, check_mode(value))
        except UnknownSession as exc:
            raise RpcError(SESSION_NOT_FOUND, str(exc)) from None
        except UnknownMode as exc:
            raise RpcError(
                INVALID_PARAMS, f"Invalid params: {exc}", {"modes": list(MODES)}
            ) from None

    def close_session(self, params: Any, request_id: Any = None) -> dict[str, Any]:
        """End the session's running turn (its prompt answers ``cancelled``) and close it."""
        session_id = self._session(params)
        with self._lock:
            self._sessions.discard(session_id)
        try:
            self.host.close_session(session_id)
        except UnknownSession as exc:
            raise RpcError(SESSION_NOT_FOUND, str(exc)) from None
        return {}

    def list_sessions(self, params: Any, request_id: Any = None) -> dict[str, Any]:
        assert self.archive is not None
        params = params if isinstance(params, dict) else {}
        cwd, cursor = params.get("cwd"), params.get("cursor")
        for name, value in (("cwd", cwd), ("cursor", cursor)):
            if value is not None and not isinstance(value, str):
                raise RpcError(INVALID_PARAMS, f"Invalid params: '{name}' must be a string")
        try:
            infos, next_cursor = self.archive.list_sessions(cwd, cursor)
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
        assert self.archive is not None
        session_id = require(params, "sessionId", str)
        # Deleting is idempotent: an id nothing holds (never used, or deleted) is gone already.
        try:
            self.archive.delete_session(session_id)
        except UnknownSession:
            pass
        except SessionServedElsewhere as exc:
            raise _in_use(exc) from None
        with self._lock:
            self._sessions.discard(session_id)
        return {}

    def _session(self, params: Any) -> str:
        """The session a request names, if this connection opened it."""
        session_id = require(params, "sessionId", str)
        with self._lock:
            if session_id not in self._sessions:
                raise RpcError(SESSION_NOT_FOUND, f"Session not found: {session_id}")
        return session_id

    def prompt(self, params: Any, request_id: Any = None) -> Any:
        session_id = self._session(params)
        content = parse_prompt(params.get("prompt"))
        said = UserMessage(f"msg_{uuid.uuid4().hex}", content.blocks)
        # The session records the prompt for replay; this client shows it already.
        own_prompts = self._sink.own_prompts
        own_prompts.sent(session_id, said.message_id)
        try:
            reply = self.host.prompt(session_id, content.parts, said)
        except UnknownSession as exc:
            own_prompts.ended(session_id, said.message_id)
            raise RpcError(SESSION_NOT_FOUND, str(exc)) from None
        except StoreReadOnly as exc:
            own_prompts.ended(session_id, said.message_id)
            raise _read_only(exc) from None
        except BaseException:
            own_prompts.ended(session_id, said.message_id)
            raise
        connection = self.connection

        def respond(done: Future[TurnResult]) -> None:
            own_prompts.ended(session_id, said.message_id)
            try:
                result = done.result()
            except StoreReadOnly as exc:  # a worker process refused it
                refused = _read_only(exc)
                connection.respond_error(request_id, refused.code, refused.message, refused.data)
                return
            except Exception as exc:  # the turn machinery itself failed
                connection.respond_error(request_id, -32603, f"Internal error: {exc!r}")
                return
            if result.stop_reason is None:
                match result.failure:
                    case "model_request":
                        code = MODEL_REQUEST_FAILED
                        message = f"The model request failed: {result.error or 'no reason given'}"
                    case "prompt_too_large":  # the editor's to fix: send less
                        code, message = INVALID_PARAMS, result.error or "The message is too large"
                    case None:
                        code, message = -32603, result.error or "Turn failed"
                    case _:
                        assert_never(result.failure)
                connection.respond_error(request_id, code, message)
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
        # ``$/cancel_request`` for a prompt ends its turn the way ``session/cancel`` does:
        # the reply still comes, with stop reason ``cancelled``, after every discard.
        connection.on_cancel_request(request_id, lambda: self._cancel_turn(session_id))
        return DEFERRED

    def cancel(self, params: Any) -> None:
        if not isinstance(params, dict) or not isinstance(params.get("sessionId"), str):
            logger.warning("session/cancel without a string sessionId ignored")
            return
        session_id = params["sessionId"]
        with self._lock:
            known = session_id in self._sessions
        if not known:
            logger.warning("session/cancel ignored: %s", UnknownSession(session_id))
            return
        self._cancel_turn(session_id)

    def _cancel_turn(self, session_id: str) -> None:
        try:
            self.host.cancel(session_id)
        except UnknownSession as exc:  # closed by the host meanwhile
            logger.warning("session/cancel ignored: %s", exc)

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
