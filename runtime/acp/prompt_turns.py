"""``session/prompt`` and ``session/cancel``: a turn started, answered when it ends, or ended early.

A prompt is answered later, when the host resolves the turn, which it does
only after every frame of the turn was handed to the sink: the handler
returns ``DEFERRED`` and the connection keeps reading in the meantime, so
``session/cancel`` and other sessions' requests are served while turns run.
"""

from __future__ import annotations

import logging
import uuid
from concurrent.futures import Future
from typing import Any, Final, assert_never

from toolprep.messages.turns import TurnResult, UserMessage
from toolprep.runtime.acp.connection_sessions import ConnectionSessions
from toolprep.runtime.acp.connection_sink import ConnectionSink
from toolprep.runtime.acp.errors import INVALID_PARAMS, MODEL_REQUEST_FAILED, RpcError
from toolprep.runtime.acp.jsonrpc_connection import JsonRpcConnection
from toolprep.runtime.acp.jsonrpc_router import DEFERRED
from toolprep.runtime.acp.prompt_content import parse_prompt
from toolprep.runtime.acp.session_errors import (
    SESSION_NOT_FOUND,
    TURN_RUNNING,
    no_worker,
    read_only,
)
from toolprep.runtime.kernel.session_host import (
    NoWorkerAvailable,
    SessionHost,
    StoreReadOnly,
    UnknownSession,
)

__all__ = ["TRACE_FIELDS", "PromptTurns", "trace_context_of"]

logger = logging.getLogger(__name__)


class PromptTurns:
    """The ``session/prompt`` and ``session/cancel`` handlers of one connection."""

    def __init__(
        self,
        host: SessionHost,
        connection: JsonRpcConnection,
        sink: ConnectionSink,
        sessions: ConnectionSessions,
    ) -> None:
        self._host = host
        self._connection = connection
        self._sink = sink
        self._sessions = sessions

    def prompt(self, params: Any, request_id: Any = None) -> Any:
        session_id = self._sessions.named(params)
        content = parse_prompt(params.get("prompt"))
        said = UserMessage(f"msg_{uuid.uuid4().hex}", content.blocks, trace_context_of(params))
        # The session records the prompt for replay; this client shows it already.
        own_prompts = self._sink.own_prompts
        own_prompts.sent(session_id, said.message_id)
        try:
            reply = self._host.prompt(session_id, content.parts, said)
        except UnknownSession as exc:
            own_prompts.ended(session_id, said.message_id)
            raise RpcError(SESSION_NOT_FOUND, str(exc)) from None
        except StoreReadOnly as exc:
            own_prompts.ended(session_id, said.message_id)
            raise read_only(exc) from None
        except NoWorkerAvailable as exc:
            own_prompts.ended(session_id, said.message_id)
            raise no_worker(exc) from None
        except BaseException:
            own_prompts.ended(session_id, said.message_id)
            raise
        connection = self._connection

        def respond(done: Future[TurnResult]) -> None:
            own_prompts.ended(session_id, said.message_id)
            try:
                result = done.result()
            except (StoreReadOnly, NoWorkerAvailable) as exc:  # refused once it waited
                refused = read_only(exc) if isinstance(exc, StoreReadOnly) else no_worker(exc)
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
                    case "turn_running":  # the editor's to fix: one turn at a time
                        code, message = TURN_RUNNING, result.error or "A turn is running"
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
        if session_id not in self._sessions:
            logger.warning("session/cancel ignored: %s", UnknownSession(session_id))
            return
        self._cancel_turn(session_id)

    def _cancel_turn(self, session_id: str) -> None:
        try:
            self._host.cancel(session_id)
        except UnknownSession as exc:  # closed by the host meanwhile
            logger.warning("session/cancel ignored: %s", exc)


TRACE_FIELDS: Final = {"traceparent": 55, "tracestate": 512}
"""The W3C trace context a request's ``_meta`` may carry, and the longest value kept
(a ``traceparent`` is 55 characters; ``tracestate`` is capped at 512 by the spec)."""


def trace_context_of(params: Any) -> dict[str, str]:
    """``traceparent`` and ``tracestate`` from the prompt's ``_meta``: strings of a sane
    length only; anything else is left out (whether it parses is the tracer's affair)."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        return {}
    return {
        name: value
        for name, longest in TRACE_FIELDS.items()
        if isinstance(value := meta.get(name), str) and 0 < len(value) <= longest
    }
