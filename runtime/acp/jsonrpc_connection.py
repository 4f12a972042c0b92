"""JSON-RPC 2.0 between two peers: the connection's books, on a transport, with a router.

One :class:`JsonRpcConnection` serves both directions: it answers the peer's
requests with registered handlers and lets local code call the peer
(``request``/``notify``). The same class runs the agent (on its own
stdin/stdout, or one per WebSocket connection of ``toolprep serve``) and a
client driving an agent subprocess (tests, the demo).

Three parts, one job each: the transport (``jsonrpc_transport``) turns
messages into bytes and back, with the size limit, the answers to messages
that are not JSON-RPC objects, frame fitting and serialised writes; the
router (``jsonrpc_router``) runs the handler registered for each incoming
method and keeps the peer's requests in progress; this module keeps the
books of the requests sent to the peer (their ids, the futures waiting for
their answers, taking one back with ``$/cancel_request``), writes answers and
notifications, and runs the connection's life (reading, closing). It is
also the one object callers hold: the other two stay behind it.

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
from concurrent.futures import Future, InvalidStateError
from types import TracebackType
from typing import IO, Any, Self, TypeAlias

from toolprep.runtime.acp.errors import (
    INTERNAL_ERROR,
    REQUEST_CANCELLED,
    ConnectionClosed,
    RpcError,
)
from toolprep.runtime.acp.jsonrpc_router import (
    CANCEL_REQUEST,
    JsonRpcRouter,
    NotificationHandler,
    RequestHandler,
)
from toolprep.runtime.acp.jsonrpc_transport import (
    DEFAULT_MAX_LINE_BYTES,
    JsonRpcTransport,
    RequestId,
    build_error,
    build_notification,
    build_request,
    build_response,
)
from toolprep.runtime.acp.line_transport import LineTransport
from toolprep.runtime.acp.transport import MessageTransport, SkippedMessage

__all__ = ["CloseCallback", "JsonRpcConnection", "OversizedMessage"]

logger = logging.getLogger(__name__)

CloseCallback: TypeAlias = Callable[[], object]


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
        self._router = JsonRpcRouter(
            self.respond,
            self.respond_error,
            self._reject,
            request_workers=request_workers,
            name=name,
        )
        self._wire = JsonRpcTransport(transport, name, self._router.answered)
        self.max_line_bytes = transport.max_message_bytes
        self.name = name
        self._state_lock = threading.Lock()
        self._close_callbacks: list[CloseCallback] = []
        self._pending: dict[int, Future[Any]] = {}
        self._ids = itertools.count(1)
        self._reader: threading.Thread | None = None
        self._pushing: int | None = None  # the thread in ``receive``, if any
        self._finished = False
        self._finish_reason = ""
        self._closed = threading.Event()

    # Builders are also reachable from the connection, which is what callers hold.
    build_response = staticmethod(build_response)
    build_error = staticmethod(build_error)

    # ------------------------------------------------------------------ registration

    def on_request(self, method: str, handler: RequestHandler) -> None:
        """Serve ``method`` with ``handler(params, request_id)`` (replaces any earlier one)."""
        self._router.on_request(method, handler)

    def on_notification(self, method: str, handler: NotificationHandler) -> None:
        """Call ``handler(params)`` for each ``method`` notification, on the reader thread."""
        self._router.on_notification(method, handler)

    def on_cancel_request(self, request_id: RequestId, hook: Callable[[], object]) -> None:
        """Call ``hook()`` if the peer sends ``$/cancel_request`` for ``request_id``.

        For a request answered later (``DEFERRED``): the hook stops the work,
        and the work's own answer still goes out (ACP requires one). The hook
        is forgotten once the request is answered.
        """
        self._router.on_cancel_request(request_id, hook)

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
        self._router.shutdown()

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
        self._wire.close()
        self._finish("connection closed")
        self._router.shutdown()

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
        self._wire.send(message)

    def wait_for_room(self, nbytes: int, timeout: float) -> bool:
        """For a sender that may wait: True once ``nbytes`` more can be written without
        overflowing the transport's buffer. A transport whose writes block (a pipe) paces
        its writer by itself: always True."""
        return self._wire.wait_for_room(nbytes, timeout)

    def notify(self, method: str, params: Any = None) -> None:
        """Send a notification; raises ``ConnectionClosed`` if the peer is gone."""
        self._wire.send(build_notification(method, params))

    def notify_many(self, method: str, params: Sequence[Any]) -> None:
        """Send one notification per ``params`` entry, in order and written together (one
        write on a stream: a batch of frames costs one system call, not one each);
        raises ``ConnectionClosed`` if the peer is gone. Nothing is sent for no entries."""
        if not params:
            return
        encode = self._wire.encode
        self._wire.write_many([encode(build_notification(method, each)) for each in params])

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
            self._wire.send(build_request(request_id, method, params))
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
        self._wire.send_quietly(build_notification(CANCEL_REQUEST, {"requestId": request_id}))
        _settle(future, error=RpcError(REQUEST_CANCELLED, reason))
        return True

    def respond(self, request_id: RequestId, result: Any) -> bool:
        """Answer the peer's request ``request_id`` with ``result``; True if written.

        Each request is answered at most once: a second answer is dropped
        with a warning. A peer that went away is logged, not raised, because
        answers are typically sent from future callbacks with nobody to catch.
        """
        if not self._router.claim(request_id):
            return False
        try:
            self._wire.send(build_response(request_id, result))
        except TypeError as exc:
            logger.error(
                "%s: result for request %r is not serialisable: %s", self.name, request_id, exc
            )
            return self._wire.send_quietly(
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
        if not self._router.claim(request_id):
            return False
        return self._wire.send_quietly(build_error(request_id, code, message, data))

    # ------------------------------------------------------------------ internals

    def _on_reader_thread(self) -> bool:
        if self._pushing is not None:
            return threading.get_ident() == self._pushing
        return self._reader is not None and threading.current_thread() is self._reader

    def _reject(self, request_id: RequestId, code: int, message: str, data: Any = None) -> None:
        """The router's way to the transport, which is made after it (it reports answers to it)."""
        self._wire.reject(request_id, code, message, data)

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
            for line in self._wire.incoming():
                if self._finished:
                    break
                self._dispatch(line)
        except Exception as exc:
            reason = f"reader failed: {exc!r}"
            logger.exception("%s: reader failed", self.name)
        finally:
            logger.debug("%s: %s", self.name, reason)
            self._finish(reason)
            # Queued handlers still run and may still answer; no new ones can arrive.
            self._router.shutdown()

    def _dispatch(self, line: bytes | SkippedMessage) -> None:
        if isinstance(line, SkippedMessage):
            self._oversized(line)
            return
        try:
            message = self._wire.decode(line)
            if message is None:
                return
            if "method" not in message and ("result" in message or "error" in message):
                # Never answer a response, not even a broken one: two peers would ping-pong errors.
                self._handle_response(message)
            else:
                self._router.route(message)
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
        self._wire.answer_oversized()

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
