"""Route the peer's requests and notifications to the handlers registered for them.

The router knows methods, not bytes: it checks that a request or
notification is well formed, finds its handler, runs it and turns what the
handler did into an answer, which it hands to the connection to write. What
the peer asks for that nobody serves is answered here: ``-32601`` for an
unknown request, a log line for an unknown notification, ``-32600`` for a
malformed envelope; a handler that raises :class:`RpcError` (``Invalid
params``, say) is answered with that code, any other exception with ``-32603``.

It also keeps the peer's requests in progress: an id in use is refused until
its request is answered, each request is answered once (:meth:`JsonRpcRouter.claim`),
and ``$/cancel_request`` runs the hook the handler left for its request.

Handlers run inline on the reader thread by default, in arrival order (so a
``session/cancel`` finds the turn the ``session/prompt`` before it
registered); ``request_workers=N`` runs request handlers on a pool of N
threads instead, for embedders whose handlers block. Notifications always run
inline, so they are never stuck behind busy workers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final, Protocol, TypeAlias

from toolprep.runtime.acp.errors import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    REQUEST_CANCELLED,
    RpcError,
)
from toolprep.runtime.acp.jsonrpc_transport import RequestId, valid_id

__all__ = [
    "CANCEL_REQUEST",
    "DEFERRED",
    "ErrorAnswer",
    "JsonRpcRouter",
    "NotificationHandler",
    "RequestHandler",
    "ResultAnswer",
]

logger = logging.getLogger(__name__)

CANCEL_REQUEST: Final = "$/cancel_request"
"""ACP's notification (either direction) that takes back an unanswered request by its id."""

RequestHandler: TypeAlias = Callable[[Any, RequestId], Any]
"""``handler(params, request_id)``: a result, a ``Future`` of one, or :data:`DEFERRED`."""

NotificationHandler: TypeAlias = Callable[[Any], object]
"""``handler(params)``; the return value is ignored."""


class _Deferred:
    """Type of :data:`DEFERRED`; a class of its own so ``is`` checks and mypy both work."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "DEFERRED"


DEFERRED: Final = _Deferred()
"""Returned by a request handler that will answer itself via ``respond``/``respond_error``.

Used when the reply must be written by the same thread that writes related
notifications (a prompt's reply after its last ``session/update``), so the
peer sees them in order.
"""


ResultAnswer: TypeAlias = Callable[[RequestId, Any], bool]
"""``respond(request_id, result)``: the connection's answer with a result."""


class ErrorAnswer(Protocol):
    """``respond_error``: the connection's error answer; and ``reject``: an error reply to a
    message that never became a request in progress."""

    def __call__(
        self, request_id: RequestId, code: int, message: str, data: Any = None
    ) -> object: ...


class JsonRpcRouter:
    """The method tables of one connection, the running of their handlers, and the peer's
    requests in progress.

    ``route`` is called by the connection's reader only; registration is
    expected before the connection starts reading. Answers go out through
    the connection's ``respond``, ``respond_error`` and ``reject``.
    """

    def __init__(
        self,
        respond: ResultAnswer,
        respond_error: ErrorAnswer,
        reject: ErrorAnswer,
        *,
        request_workers: int,
        name: str,
    ) -> None:
        if request_workers < 0:
            raise ValueError("request_workers must be >= 0 (0 runs handlers inline)")
        self._respond = respond
        self._respond_error = respond_error
        self._reject = reject
        self.name = name
        self._lock = threading.Lock()
        self._awaiting_reply: set[RequestId] = set()
        self._cancel_hooks: dict[RequestId, Callable[[], object]] = {}
        self._request_handlers: dict[str, RequestHandler] = {}
        self._notification_handlers: dict[str, NotificationHandler] = {}
        self._pool: ThreadPoolExecutor | None = (
            ThreadPoolExecutor(request_workers, thread_name_prefix=f"{name}-handler")
            if request_workers
            else None
        )

    def on_request(self, method: str, handler: RequestHandler) -> None:
        """Serve ``method`` with ``handler(params, request_id)`` (replaces any earlier one)."""
        self._request_handlers[method] = handler

    def on_notification(self, method: str, handler: NotificationHandler) -> None:
        """Call ``handler(params)`` for each ``method`` notification, on the reader thread."""
        self._notification_handlers[method] = handler

    def on_cancel_request(self, request_id: RequestId, hook: Callable[[], object]) -> None:
        """Call ``hook()`` if the peer sends ``$/cancel_request`` for ``request_id``, while it
        is in progress; the hook is forgotten once the request is answered."""
        with self._lock:
            if request_id in self._awaiting_reply:
                self._cancel_hooks[request_id] = hook

    def claim(self, request_id: RequestId) -> bool:
        """Take the right to answer ``request_id``: True once, False (with a warning) if it is
        not in progress, answered already say."""
        with self._lock:
            if request_id not in self._awaiting_reply:
                logger.warning(
                    "%s: answer to request %r dropped: it is not awaiting one (answered already?)",
                    self.name,
                    request_id,
                )
                return False
            self._awaiting_reply.discard(request_id)
            self._cancel_hooks.pop(request_id, None)
            return True

    def answered(self, request_id: RequestId) -> None:
        """A response for ``request_id`` is being written, whoever wrote it (a raw ``send``
        too): it awaits no other answer and can no longer be cancelled."""
        with self._lock:
            self._awaiting_reply.discard(request_id)
            self._cancel_hooks.pop(request_id, None)

    def shutdown(self) -> None:
        """No new handlers; queued ones still run and may still answer."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)

    # ------------------------------------------------------------------ routing

    def route(self, message: dict[str, Any]) -> None:
        """Handle a message that is not a response: a request or a notification."""
        has_id = "id" in message
        raw_id = message.get("id")
        reply_id: RequestId = raw_id if has_id and valid_id(raw_id) else None
        if message.get("jsonrpc") != "2.0":
            self._reject_malformed(reply_id, "Invalid Request: 'jsonrpc' must be \"2.0\"")
            return
        if "method" not in message:
            self._reject_malformed(reply_id, "Invalid Request: missing 'method'")
            return
        method = message["method"]
        if not isinstance(method, str):
            self._reject_malformed(reply_id, "Invalid Request: 'method' must be a string")
            return
        if has_id and not valid_id(raw_id):
            self._reject(
                None,
                INVALID_REQUEST,
                "Invalid Request: 'id' must be a string, a 64-bit integer or null",
            )
            return
        params = message.get("params")
        if params is not None and not isinstance(params, (dict, list)):
            self._reject_malformed(
                reply_id, "Invalid Request: 'params' must be an object or an array"
            )
            return
        if has_id:
            self._request(method, params, reply_id)
        else:
            self._notification(method, params)

    def _reject_malformed(self, reply_id: RequestId, message: str) -> None:
        """Refuse a message that cannot become a request. Its own id is echoed unless a
        request in progress holds it: then the refusal goes out with a null id (the id in
        ``data``), or the peer would take it for that request's answer and the real one,
        coming later, would be dropped as a second."""
        with self._lock:
            in_use = reply_id is not None and reply_id in self._awaiting_reply
        if in_use:
            self._reject(None, INVALID_REQUEST, message, {"id": reply_id})
        else:
            self._reject(reply_id, INVALID_REQUEST, message)

    def _notification(self, method: str, params: Any) -> None:
        if method == CANCEL_REQUEST:
            self._cancel(params)
            return
        handler = self._notification_handlers.get(method)
        if handler is None:
            logger.info("%s: unknown notification %r ignored", self.name, method)
            return
        try:
            handler(params)
        except Exception:
            logger.exception("%s: notification handler for %r failed", self.name, method)

    def _cancel(self, params: Any) -> None:
        """``$/cancel_request``: run the request's hook; unknown or answered ids are ignored
        (the answer may have crossed the notification on the wire)."""
        if not isinstance(params, dict) or not valid_id(params.get("requestId")):
            logger.warning("%s: $/cancel_request without a valid requestId ignored", self.name)
            return
        with self._lock:
            hook = self._cancel_hooks.pop(params["requestId"], None)
        if hook is None:
            logger.debug("%s: nothing to cancel for request %r", self.name, params["requestId"])
            return
        try:
            hook()
        except Exception:
            logger.exception("%s: cancel hook of request %r failed", self.name, params["requestId"])

    def _request(self, method: str, params: Any, request_id: RequestId) -> None:
        with self._lock:
            duplicate = request_id in self._awaiting_reply
            if not duplicate:
                self._awaiting_reply.add(request_id)
        if duplicate:
            self._reject(
                None,
                INVALID_REQUEST,
                f"Invalid Request: id {request_id!r} is already used by a request in progress",
                {"id": request_id},
            )
            return
        handler = self._request_handlers.get(method)
        if handler is None:
            self._respond_error(
                request_id, METHOD_NOT_FOUND, f"Method not found: {method}", {"method": method}
            )
            return
        if self._pool is None:
            self._run_handler(handler, method, params, request_id)
            return
        try:
            self._pool.submit(self._run_handler, handler, method, params, request_id)
        except RuntimeError:  # pool shut down by close()
            self._respond_error(request_id, INTERNAL_ERROR, "Internal error: connection is closing")

    def _run_handler(
        self, handler: RequestHandler, method: str, params: Any, request_id: RequestId
    ) -> None:
        try:
            outcome = handler(params, request_id)
        except RpcError as exc:
            self._respond_error(request_id, exc.code, exc.message, exc.data)
            return
        except Exception as exc:
            logger.exception("%s: handler for %r failed", self.name, method)
            self._respond_error(request_id, INTERNAL_ERROR, _internal_message(method, exc))
            return
        if outcome is DEFERRED:
            return
        if isinstance(outcome, Future):
            outcome.add_done_callback(
                lambda done: self._respond_from_future(method, request_id, done)
            )
            return
        self._respond(request_id, outcome)

    def _respond_from_future(self, method: str, request_id: RequestId, done: Future[Any]) -> None:
        if done.cancelled():
            self._respond_error(request_id, REQUEST_CANCELLED, "Request cancelled")
            return
        error = done.exception()
        if error is None:
            self._respond(request_id, done.result())
        elif isinstance(error, RpcError):
            self._respond_error(request_id, error.code, error.message, error.data)
        else:
            logger.error("%s: deferred %r failed: %r", self.name, method, error)
            self._respond_error(request_id, INTERNAL_ERROR, _internal_message(method, error))


def _internal_message(method: str, exc: BaseException) -> str:
    return f"Internal error in {method}: {type(exc).__name__}: {exc}"
