"""JSON-RPC 2.0 over a message transport: newline-delimited on stdio, or WebSocket frames.

One :class:`JsonRpcConnection` serves both directions: it answers the peer's
requests with registered handlers and lets local code call the peer
(``request``/``notify``). The same class runs the agent (on its own
stdin/stdout, or one per WebSocket connection of ``toolprep serve``) and a
client driving an agent subprocess (tests, the demo).

Threading model, and why:

* **One reader thread** owns the transport's input. The transport bounds
  each message (``max_line_bytes``) and skips what is over the limit; a
  skipped message that was the peer's *response* fails the local request it
  answers at once with :class:`OversizedMessage` instead of waiting for its
  timeout.
* Or **no reader thread**: a server on an event loop pushes each message
  with :meth:`JsonRpcConnection.receive`, one at a time and in order, from
  whichever pool thread it picked; that thread is the reader meanwhile.
* **Handlers run inline on the reader thread by default**, in arrival order.
  That ordering is what makes ``session/cancel`` reliable: the
  ``session/prompt`` handler has registered its turn before the cancel that
  follows it on the wire is dispatched. In exchange handlers must return
  quickly; long work (a prompt turn, which can take minutes) returns a
  ``concurrent.futures.Future`` or :data:`DEFERRED` and answers later, while
  the reader keeps serving other messages, cancels included. Waiting on an
  outgoing request's future from the reader thread would deadlock (its
  response could never be read), so such a wait raises ``RuntimeError``.
  ``request_workers=N`` instead runs request handlers on a bounded pool of
  N threads (notifications stay inline, so they are never stuck behind busy
  workers), for embedders whose handlers block; arrival order between a
  request and a later notification is then no longer guaranteed.
* **Writes are serialised by a lock** and flushed per message, so any
  thread (handler, emitter, future callback) may call :meth:`send`. A broken
  pipe surfaces as :class:`ConnectionClosed`, never as a dead process.
* Nothing here writes to stdout except through the output stream given to
  it; diagnostics go to :mod:`logging`.

Batches (JSON arrays) are not supported; ACP does not use them, and they
are answered with a single ``-32600`` error.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from types import TracebackType
from typing import IO, Any, Final, Self, TypeAlias, TypeVar

import orjson

from toolprep.runtime.acp.errors import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    ConnectionClosed,
    RpcError,
)
from toolprep.runtime.acp.frame_fit import fit_message, message_size
from toolprep.runtime.acp.line_transport import LineTransport
from toolprep.runtime.acp.transport import MessageTransport, PacedTransport, SkippedMessage

__all__ = [
    "CANCEL_REQUEST",
    "DEFAULT_MAX_LINE_BYTES",
    "DEFERRED",
    "CloseCallback",
    "ConnectionClosed",
    "JsonRpcConnection",
    "NotificationHandler",
    "OversizedMessage",
    "RequestHandler",
    "RequestId",
    "RpcError",
    "build_error",
    "build_notification",
    "build_request",
    "build_response",
    "oversized_error",
]

logger = logging.getLogger(__name__)

_Out = TypeVar("_Out")

CANCEL_REQUEST: Final = "$/cancel_request"
"""ACP's notification (either direction) that takes back an unanswered request by its id."""

RequestId: TypeAlias = str | int | None
"""A JSON-RPC id as ACP allows it: string, 64-bit integer or null."""

RequestHandler: TypeAlias = Callable[[Any, RequestId], Any]
"""``handler(params, request_id)``: a result, a ``Future`` of one, or :data:`DEFERRED`."""

NotificationHandler: TypeAlias = Callable[[Any], object]
"""``handler(params)``; the return value is ignored."""

CloseCallback: TypeAlias = Callable[[], object]

DEFAULT_MAX_LINE_BYTES: Final = 8 * 1024 * 1024
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


def oversized_error(limit: int) -> dict[str, Any]:
    """The reply to a message over ``limit`` bytes, skipped unread (so its id is unknown).

    ``toolprep connect`` gives the editor the same reply for a line over the
    daemon's limit, so an editor sees one behaviour whichever it runs.
    """
    return build_error(
        None,
        INVALID_REQUEST,
        f"Invalid Request: message exceeds the size limit of {limit} bytes and was discarded",
        {"maxLineBytes": limit},
    )


class OversizedMessage(Exception):
    """The peer answered a local request with a message over ``max_line_bytes``.

    The answer was discarded unread; ``size`` is its length in bytes.
    """

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"the reply is {size - limit} bytes over the {limit}-byte limit")
        self.size = size
        self.limit = limit

    @property
    def excess(self) -> int:
        return self.size - self.limit


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


def build_response(request_id: RequestId, result: Any) -> dict[str, Any]:
    """A success response; public so a caller can ``send`` it in order with its other frames."""
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def build_error(request_id: RequestId, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """An error response (``data`` omitted when ``None``), shaped as the ACP schema's ``Error``."""
    return {"jsonrpc": "2.0", "id": request_id, "error": RpcError(code, message, data).to_dict()}


def build_request(request_id: RequestId, method: str, params: Any = None) -> dict[str, Any]:
    """A request; ``params`` omitted when ``None``."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def build_notification(method: str, params: Any = None) -> dict[str, Any]:
    """A notification; ``params`` omitted when ``None``."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


def _valid_id(value: Any) -> bool:
    if value is None or isinstance(value, str):
        return True
    return (
        isinstance(value, int) and not isinstance(value, bool) and _INT64_MIN <= value <= _INT64_MAX
    )


def _settle(future: Future[Any], *, result: Any = None, error: BaseException | None = None) -> None:
    """Complete ``future`` unless its owner already cancelled it."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except InvalidStateError:
        pass


class _ReplyFuture(Future[Any]):
    """Future of an outgoing request that refuses to be awaited on the reader thread.

    Only the reader thread can deliver the response, so blocking it on the
    response would hang the connection forever; failing loudly instead turns
    that bug into an error the handler reports.
    """

    def __init__(self, connection: JsonRpcConnection) -> None:
        super().__init__()
        self._connection = connection

    def _check_thread(self) -> None:
        if not self.done() and self._connection._on_reader_thread():
            raise RuntimeError(
                "waiting for a JSON-RPC response on the connection's reader thread would "
                "deadlock; use add_done_callback or request_workers instead"
            )

    def result(self, timeout: float | None = None) -> Any:
        self._check_thread()
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._check_thread()
        return super().exception(timeout)


class JsonRpcConnection:
    """A JSON-RPC 2.0 peer: on newline-delimited JSON over two byte streams, or
    :meth:`over` any :class:`MessageTransport`.

    The input is read only by the reader thread started by :meth:`start`;
    the output is written only through :meth:`send`. Blocking streams are
    expected (pipes, ``sys.stdin.buffer``).
    """

    def __init__(
        self,
        input_stream: IO[bytes],
        output_stream: IO[bytes],
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        request_workers: int = 0,
        name: str = "jsonrpc",
    ) -> None:
        transport = LineTransport(input_stream, output_stream, max_line_bytes)
        self._setup(transport, request_workers=request_workers, name=name)

    @classmethod
    def over(
        cls, transport: MessageTransport, *, request_workers: int = 0, name: str = "jsonrpc"
    ) -> Self:
        """A connection on any transport (a WebSocket, say) rather than a pair of streams."""
        connection = cls.__new__(cls)
        connection._setup(transport, request_workers=request_workers, name=name)
        return connection

    def _setup(self, transport: MessageTransport, *, request_workers: int, name: str) -> None:
        if request_workers < 0:
            raise ValueError("request_workers must be >= 0 (0 runs handlers inline)")
        self._transport = transport
        self.max_line_bytes = transport.max_message_bytes
        self.name = name
        self._write_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._request_handlers: dict[str, RequestHandler] = {}
        self._notification_handlers: dict[str, NotificationHandler] = {}
        self._close_callbacks: list[CloseCallback] = []
        self._pending: dict[int, Future[Any]] = {}
        self._awaiting_reply: set[str | int | None] = set()
        self._cancel_hooks: dict[RequestId, Callable[[], object]] = {}
        self._ids = itertools.count(1)
        self._reader: threading.Thread | None = None
        self._pushing: int | None = None  # the thread in ``receive``, if any
        self._finished = False
        self._finish_reason = ""
        self._write_failure: str | None = None
        self._closed = threading.Event()
        self._pool: ThreadPoolExecutor | None = (
            ThreadPoolExecutor(request_workers, thread_name_prefix=f"{name}-handler")
            if request_workers
            else None
        )

    # Builders are also reachable from the connection, which is what callers hold.
    build_response = staticmethod(build_response)
    build_error = staticmethod(build_error)

    # ------------------------------------------------------------------ registration

    def on_request(self, method: str, handler: RequestHandler) -> None:
        """Serve ``method`` with ``handler(params, request_id)`` (replaces any earlier one)."""
        self._request_handlers[method] = handler

    def on_notification(self, method: str, handler: NotificationHandler) -> None:
        """Call ``handler(params)`` for each ``method`` notification, on the reader thread."""
        self._notification_handlers[method] = handler

    def on_cancel_request(self, request_id: RequestId, hook: Callable[[], object]) -> None:
        """Call ``hook()`` if the peer sends ``$/cancel_request`` for ``request_id``.

        For a request answered later (``DEFERRED``): the hook stops the work,
        and the work's own answer still goes out (ACP requires one). The hook
        is forgotten once the request is answered.
        """
        with self._state_lock:
            if request_id in self._awaiting_reply:
                self._cancel_hooks[request_id] = hook

    def on_close(self, callback: CloseCallback) -> None:
        """Call ``callback()`` once when the input ends or :meth:`close` is called.

        The agent cancels its running turns here. Registered after the fact,
        it runs at once, so a close is never missed.
        """
        with self._state_lock:
            if not self._finished:
                self._close_callbacks.append(callback)
                return
        self._run_close_callback(callback)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the reader thread; register handlers first so no message finds none."""
        with self._state_lock:
            if self._reader is not None:
                raise RuntimeError("connection already started")
            # Daemon: a read blocked on a silent peer must not keep the process alive.
            self._reader = threading.Thread(
                target=self._read_loop, name=f"{self.name}-reader", daemon=True
            )
        self._reader.start()

    def run(self) -> None:
        """Read on the calling thread until the input ends (instead of ``start``).

        For a server that already gives each connection a thread of its own:
        one thread fewer per connection. The calling thread becomes the
        reader, with its rules: handlers run on it, and it must not wait for
        a reply from the peer.
        """
        with self._state_lock:
            if self._reader is not None:
                raise RuntimeError("connection already started")
            self._reader = threading.current_thread()
        self._read_loop()

    def receive(self, message: bytes | SkippedMessage) -> None:
        """Handle one incoming message on the calling thread (instead of ``start``/``run``).

        For a server whose connections live on an event loop: it hands each
        connection's messages, in arrival order and one at a time, to a
        small shared pool, so no connection owns a thread. While a message is
        handled, the calling thread counts as the reader (its rules apply).
        """
        with self._state_lock:
            if self._reader is not None:
                raise RuntimeError("a reader thread already reads this connection")
            self._pushing = threading.get_ident()
        try:
            if not self._finished:
                self._dispatch(message)
        finally:
            self._pushing = None

    def end_of_input(self, reason: str = "input closed (EOF)") -> None:
        """The peer sent its last message: what ``receive`` mode has instead of EOF."""
        logger.debug("%s: %s", self.name, reason)
        self._finish(reason)
        if self._pool is not None:
            self._pool.shutdown(wait=False)

    def wait_closed(self, timeout: float | None = None) -> bool:
        """Block until the input ended (``on_close`` callbacks done) or ``close()``; True if so."""
        return self._closed.wait(timeout)

    @property
    def closed(self) -> bool:
        """True once the input ended or :meth:`close` was called."""
        return self._closed.is_set()

    def close(self) -> None:
        """Stop talking: further sends raise, pending requests fail, ``on_close`` runs.

        The output stream is closed (the peer sees EOF); the input stream is
        left to the reader thread, which drops anything it still reads and
        exits at EOF: closing a stream another thread is blocked reading is
        not safe.
        """
        with self._write_lock:
            if self._write_failure is None:
                self._write_failure = "connection closed"
            self._transport.close_output()
        self._finish("connection closed")
        if self._pool is not None:
            self._pool.shutdown(wait=False)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ sending

    def send(self, message: Mapping[str, Any]) -> None:
        """Write ``message`` as one compact JSON message; safe from any thread.

        Raises ``ConnectionClosed`` if the output is closed or broken, and
        ``TypeError`` (``orjson.JSONEncodeError``) if it is not serialisable.
        A raw escape hatch: a response sent this way still counts as the
        answer to its request, so ``respond`` will not answer it twice.
        """
        data = self._fitted(message, self._transport.encode(message))
        if "method" not in message and ("result" in message or "error" in message):
            answered = message.get("id")
            if _valid_id(answered):
                with self._state_lock:
                    self._awaiting_reply.discard(answered)
                    self._cancel_hooks.pop(answered, None)
        self._write_out(self._transport.write, data)

    def _write_out(self, write: Callable[[_Out], None], out: _Out) -> None:
        """``write(out)`` under the write lock; a broken output closes it for good."""
        with self._write_lock:
            if self._write_failure is not None:
                raise ConnectionClosed(self._write_failure)
            try:
                write(out)
            except (OSError, ValueError) as exc:
                self._write_failure = f"cannot write to the peer: {exc}"
                logger.warning("%s: output broken: %s", self.name, exc)
                self._transport.close_output()
                raise ConnectionClosed(self._write_failure) from exc

    def _fitted(self, message: Mapping[str, Any], data: bytes) -> bytes:
        """``data``, or a cut copy when it is over the limit and may be cut (``frame_fit``).

        A message that cannot be cut goes out whole: the peer's reader is what
        refuses it, as it would any other oversized message.
        """
        if message_size(data) <= self.max_line_bytes:
            return data
        fitted = fit_message(dict(message), data, self.max_line_bytes, self._transport.encode)
        if fitted is None:
            logger.warning(
                "%s: sending a %d-byte message, over the %d-byte limit: it cannot be cut",
                self.name,
                message_size(data),
                self.max_line_bytes,
            )
            return data
        logger.info(
            "%s: cut a %d-byte %s to %d bytes to fit the %d-byte limit",
            self.name,
            message_size(data),
            message.get("method"),
            message_size(fitted),
            self.max_line_bytes,
        )
        return fitted

    def wait_for_room(self, nbytes: int, timeout: float) -> bool:
        """For a sender that may wait: True once ``nbytes`` more can be written without
        overflowing the transport's buffer. A transport whose writes block (a pipe) paces
        its writer by itself: always True."""
        transport = self._transport
        if isinstance(transport, PacedTransport):
            return transport.wait_for_room(nbytes, timeout)
        return True

    def notify(self, method: str, params: Any = None) -> None:
        """Send a notification; raises ``ConnectionClosed`` if the peer is gone."""
        self.send(build_notification(method, params))

    def notify_many(self, method: str, params: Sequence[Any]) -> None:
        """Send one notification per ``params`` entry, in order and written together (one
        write on a stream: a batch of frames costs one system call, not one each);
        raises ``ConnectionClosed`` if the peer is gone. Nothing is sent for no entries."""
        if not params:
            return
        encode = self._transport.encode
        messages = [
            self._fitted(notification, encode(notification))
            for notification in (build_notification(method, each) for each in params)
        ]
        self._write_out(self._transport.write_many, messages)

    def request(self, method: str, params: Any = None) -> Future[Any]:
        """Call the peer; the future gets the result, an ``RpcError``, or ``ConnectionClosed``.

        Never raises for a gone peer (the future fails instead), so callers
        handle every outcome in one done-callback.
        """
        future = _ReplyFuture(self)
        with self._state_lock:
            if self._finished:
                future.set_exception(ConnectionClosed(self._finish_reason))
                return future
            request_id = next(self._ids)
            self._pending[request_id] = future
        try:
            self.send(build_request(request_id, method, params))
        except ConnectionClosed as exc:
            with self._state_lock:
                self._pending.pop(request_id, None)
            _settle(future, error=exc)
        except TypeError:
            with self._state_lock:
                self._pending.pop(request_id, None)
            raise
        return future

    def withdraw(self, future: Future[Any], reason: str) -> bool:
        """Take back a request the peer has not answered: tell it with ``$/cancel_request``
        and fail ``future`` with ``RpcError(REQUEST_CANCELLED, reason)`` now; its late
        answer is ignored. False if it was answered (or withdrawn) already."""
        with self._state_lock:
            request_id = next((i for i, f in self._pending.items() if f is future), None)
            if request_id is None:
                return False
            del self._pending[request_id]
        self._send_quietly(build_notification(CANCEL_REQUEST, {"requestId": request_id}))
        _settle(future, error=RpcError(REQUEST_CANCELLED, reason))
        return True

    def respond(self, request_id: RequestId, result: Any) -> bool:
        """Answer the peer's request ``request_id`` with ``result``; True if written.

        Each request is answered at most once: a second answer is dropped
        with a warning. A peer that went away is logged, not raised, because
        answers are typically sent from future callbacks with nobody to catch.
        """
        if not self._claim(request_id):
            return False
        try:
            self.send(build_response(request_id, result))
        except TypeError as exc:
            logger.error(
                "%s: result for request %r is not serialisable: %s", self.name, request_id, exc
            )
            return self._send_quietly(
                build_error(
                    request_id,
                    INTERNAL_ERROR,
                    f"Internal error: result is not JSON-serialisable: {exc}",
                )
            )
        except ConnectionClosed as exc:
            logger.info("%s: response to %r not delivered: %s", self.name, request_id, exc)
            return False
        return True

    def respond_error(
        self, request_id: RequestId, code: int, message: str, data: Any = None
    ) -> bool:
        """Answer ``request_id`` with an error; same once-only and gone-peer rules as respond."""
        if not self._claim(request_id):
            return False
        return self._send_quietly(build_error(request_id, code, message, data))

    # ------------------------------------------------------------------ internals

    def _on_reader_thread(self) -> bool:
        if self._pushing is not None:
            return threading.get_ident() == self._pushing
        return self._reader is not None and threading.current_thread() is self._reader

    def _claim(self, request_id: RequestId) -> bool:
        with self._state_lock:
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

    def _send_quietly(self, message: Mapping[str, Any]) -> bool:
        try:
            self.send(message)
        except ConnectionClosed as exc:
            logger.info("%s: message not delivered: %s", self.name, exc)
            return False
        except TypeError as exc:
            logger.error("%s: error data is not serialisable: %s", self.name, exc)
            return False
        return True

    def _reject(self, request_id: RequestId, code: int, message: str, data: Any = None) -> None:
        """Error reply to a message that never became a tracked request."""
        logger.warning("%s: rejected message: %s", self.name, message)
        self._send_quietly(build_error(request_id, code, message, data))

    def _finish(self, reason: str) -> None:
        with self._state_lock:
            if self._finished:
                return
            self._finished = True
            self._finish_reason = reason
            pending = list(self._pending.values())
            self._pending.clear()
            callbacks = list(self._close_callbacks)
            self._close_callbacks.clear()
        for future in pending:
            _settle(future, error=ConnectionClosed(reason))
        for callback in callbacks:
            self._run_close_callback(callback)
        self._closed.set()

    def _run_close_callback(self, callback: CloseCallback) -> None:
        try:
            callback()
        except Exception:
            logger.exception("%s: on_close callback failed", self.name)

    # ------------------------------------------------------------------ reading

    def _read_loop(self) -> None:
        reason = "input closed (EOF)"
        try:
            for line in self._transport.incoming():
                if self._finished:
                    break
                self._dispatch(line)
        except Exception as exc:
            reason = f"reader failed: {exc!r}"
            logger.exception("%s: reader failed", self.name)
        finally:
            logger.debug("%s: %s", self.name, reason)
            self._finish(reason)
            if self._pool is not None:
                # Queued handlers still run and may still answer; no new ones can arrive.
                self._pool.shutdown(wait=False)

    def _dispatch(self, line: bytes | SkippedMessage) -> None:
        if isinstance(line, SkippedMessage):
            self._oversized(line)
            return
        try:
            self._handle_line(line)
        except Exception:
            logger.exception("%s: failed to handle a message", self.name)

    def _oversized(self, line: SkippedMessage) -> None:
        """Fail the local request an oversized response answered, or reject the line."""
        future: Future[Any] | None = None
        if line.response_id is not None and line.size is not None:
            with self._state_lock:
                future = self._pending.pop(line.response_id, None)
        if future is not None and line.size is not None:
            # Never answer a response: the peer only learns of it through its own request.
            logger.warning(
                "%s: response to request %r discarded: %d bytes, over the %d-byte limit",
                self.name,
                line.response_id,
                line.size,
                self.max_line_bytes,
            )
            _settle(future, error=OversizedMessage(line.size, self.max_line_bytes))
            return
        reply = oversized_error(self.max_line_bytes)
        logger.warning("%s: rejected message: %s", self.name, reply["error"]["message"])
        self._send_quietly(reply)

    def _handle_line(self, line: bytes) -> None:
        if not line.strip():
            return
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s <- %s", self.name, line[:500])
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            self._reject(None, PARSE_ERROR, f"Parse error: {exc}")
            return
        self._handle_message(message)

    def _handle_message(self, message: Any) -> None:
        if isinstance(message, list):
            self._reject(
                None,
                INVALID_REQUEST,
                "Invalid Request: batch requests (JSON arrays) are not supported",
            )
            return
        if not isinstance(message, dict):
            self._reject(None, INVALID_REQUEST, "Invalid Request: expected a JSON object")
            return
        if "method" not in message and ("result" in message or "error" in message):
            # Never answer a response, not even a broken one: two peers would ping-pong errors.
            self._handle_response(message)
            return
        has_id = "id" in message
        raw_id = message.get("id")
        reply_id: RequestId = raw_id if has_id and _valid_id(raw_id) else None
        if message.get("jsonrpc") != "2.0":
            self._reject(reply_id, INVALID_REQUEST, "Invalid Request: 'jsonrpc' must be \"2.0\"")
            return
        if "method" not in message:
            self._reject(reply_id, INVALID_REQUEST, "Invalid Request: missing 'method'")
            return
        method = message["method"]
        if not isinstance(method, str):
            self._reject(reply_id, INVALID_REQUEST, "Invalid Request: 'method' must be a string")
            return
        if has_id and not _valid_id(raw_id):
            self._reject(
                None,
                INVALID_REQUEST,
                "Invalid Request: 'id' must be a string, a 64-bit integer or null",
            )
            return
        params = message.get("params")
        if params is not None and not isinstance(params, (dict, list)):
            self._reject(
                reply_id, INVALID_REQUEST, "Invalid Request: 'params' must be an object or an array"
            )
            return
        if has_id:
            self._handle_request(method, params, reply_id)
        else:
            self._handle_notification(method, params)

    def _handle_response(self, message: dict[str, Any]) -> None:
        response_id = message.get("id")
        if message.get("jsonrpc") != "2.0":
            logger.warning('%s: response without "jsonrpc": "2.0" accepted', self.name)
        future: Future[Any] | None = None
        if isinstance(response_id, int) and not isinstance(response_id, bool):
            with self._state_lock:
                future = self._pending.pop(response_id, None)
        if future is None:
            if response_id is None and "error" in message:
                logger.warning("%s: peer reported an error: %r", self.name, message["error"])
            else:
                logger.warning("%s: response to unknown request %r ignored", self.name, response_id)
            return
        if "error" in message:
            error = message["error"]
            if (
                isinstance(error, dict)
                and isinstance(error.get("code"), int)
                and isinstance(error.get("message"), str)
            ):
                _settle(future, error=RpcError(error["code"], error["message"], error.get("data")))
            else:
                _settle(
                    future, error=RpcError(INTERNAL_ERROR, f"Malformed error response: {error!r}")
                )
        else:
            _settle(future, result=message.get("result"))

    def _handle_notification(self, method: str, params: Any) -> None:
        if method == CANCEL_REQUEST:
            self._cancel_request(params)
            return
        handler = self._notification_handlers.get(method)
        if handler is None:
            logger.info("%s: unknown notification %r ignored", self.name, method)
            return
        try:
            handler(params)
        except Exception:
            logger.exception("%s: notification handler for %r failed", self.name, method)

    def _cancel_request(self, params: Any) -> None:
        """``$/cancel_request``: run the request's hook; unknown or answered ids are ignored
        (the answer may have crossed the notification on the wire)."""
        if not isinstance(params, dict) or not _valid_id(params.get("requestId")):
            logger.warning("%s: $/cancel_request without a valid requestId ignored", self.name)
            return
        with self._state_lock:
            hook = self._cancel_hooks.pop(params["requestId"], None)
        if hook is None:
            logger.debug("%s: nothing to cancel for request %r", self.name, params["requestId"])
            return
        try:
            hook()
        except Exception:
            logger.exception("%s: cancel hook of request %r failed", self.name, params["requestId"])

    def _handle_request(self, method: str, params: Any, request_id: RequestId) -> None:
        with self._state_lock:
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
            self.respond_error(
                request_id, METHOD_NOT_FOUND, f"Method not found: {method}", {"method": method}
            )
            return
        if self._pool is None:
            self._run_handler(handler, method, params, request_id)
            return
        try:
            self._pool.submit(self._run_handler, handler, method, params, request_id)
        except RuntimeError:  # pool shut down by close()
            self.respond_error(request_id, INTERNAL_ERROR, "Internal error: connection is closing")

    def _run_handler(
        self, handler: RequestHandler, method: str, params: Any, request_id: RequestId
    ) -> None:
        try:
            outcome = handler(params, request_id)
        except RpcError as exc:
            self.respond_error(request_id, exc.code, exc.message, exc.data)
            return
        except Exception as exc:
            logger.exception("%s: handler for %r failed", self.name, method)
            self.respond_error(request_id, INTERNAL_ERROR, _internal_message(method, exc))
            return
        if outcome is DEFERRED:
            return
        if isinstance(outcome, Future):
            outcome.add_done_callback(
                lambda done: self._respond_from_future(method, request_id, done)
            )
            return
        self.respond(request_id, outcome)

    def _respond_from_future(self, method: str, request_id: RequestId, done: Future[Any]) -> None:
        if done.cancelled():
            self.respond_error(request_id, REQUEST_CANCELLED, "Request cancelled")
            return
        error = done.exception()
        if error is None:
            self.respond(request_id, done.result())
        elif isinstance(error, RpcError):
            self.respond_error(request_id, error.code, error.message, error.data)
        else:
            logger.error("%s: deferred %r failed: %r", self.name, method, error)
            self.respond_error(request_id, INTERNAL_ERROR, _internal_message(method, error))


def _internal_message(method: str, exc: BaseException) -> str:
    return f"Internal error in {method}: {type(exc).__name__}: {exc}"
