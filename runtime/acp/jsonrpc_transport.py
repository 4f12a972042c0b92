"""The wire side of a JSON-RPC connection: messages in and out of one :class:`MessageTransport`.

A :class:`~toolprep.runtime.acp.jsonrpc_connection.JsonRpcConnection` keeps
the protocol's books (ids, pending requests, answers) and its router runs the
handlers; everything about the bytes is here, so neither of them sees a line,
a frame or a size:

* **Reading**: each incoming message is decoded to a JSON object here. A
  message that is not one (blank, unparseable, a batch, a scalar) is answered
  here with ``-32700``/``-32600`` and never reaches the connection; so is a
  message the framing skipped for being over the size limit
  (:func:`oversized_error`), unless it was the answer to a local request,
  which only the connection can tell.
* **Writing**: each outgoing message is encoded by the framing and, when it
  is over the limit, cut to fit (``frame_fit``); writes are serialised by a
  lock, so any thread may write, and a batch of frames goes out in one write
  where the framing allows. A broken output is closed for good and surfaces
  as :class:`ConnectionClosed`, never as a dead process.

The message builders live here too: they are what goes on the wire, and the
oversized answer is one of them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final, TypeAlias

import orjson

from toolprep.runtime.acp.errors import INVALID_REQUEST, PARSE_ERROR, ConnectionClosed, RpcError
from toolprep.runtime.acp.frame_fit import fit_message, message_size
from toolprep.runtime.acp.transport import MessageTransport, PacedTransport, SkippedMessage

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "JsonRpcTransport",
    "RequestId",
    "build_error",
    "build_notification",
    "build_request",
    "build_response",
    "oversized_error",
    "valid_id",
]

logger = logging.getLogger(__name__)

RequestId: TypeAlias = str | int | None
"""A JSON-RPC id as ACP allows it: string, 64-bit integer or null."""

DEFAULT_MAX_LINE_BYTES: Final = 8 * 1024 * 1024
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


def valid_id(value: Any) -> bool:
    """True for an id ACP allows (see :data:`RequestId`); a bool is not an integer here."""
    if value is None or isinstance(value, str):
        return True
    return (
        isinstance(value, int) and not isinstance(value, bool) and _INT64_MIN <= value <= _INT64_MAX
    )


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


class JsonRpcTransport:
    """Decodes, encodes, fits and writes the messages of one connection on one framing.

    ``answered(id)`` is told of each response written, before it is written,
    so the connection stops awaiting an answer to that request whoever sent it.
    ``incoming`` and ``decode`` are used by the connection's reader only;
    every other method is safe from any thread.
    """

    def __init__(
        self, transport: MessageTransport, name: str, answered: Callable[[RequestId], object]
    ) -> None:
        self._transport = transport
        self._answered = answered
        self.max_line_bytes = transport.max_message_bytes
        self.name = name
        self._write_lock = threading.Lock()
        self._write_failure: str | None = None

    # ------------------------------------------------------------------ reading

    def incoming(self) -> Iterator[bytes | SkippedMessage]:
        """The framing's messages in arrival order; ends when the peer is gone."""
        return self._transport.incoming()

    def decode(self, line: bytes) -> dict[str, Any] | None:
        """``line`` as a JSON object, or None when there is none to handle.

        None for a blank line (skipped), and for one that is not a JSON object,
        which is answered here: its id cannot be read, so the answer has none.
        """
        if not line.strip():
            return None
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s <- %s", self.name, line[:500])
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            self.reject(None, PARSE_ERROR, f"Parse error: {exc}")
            return None
        if isinstance(message, dict):
            return message
        if isinstance(message, list):
            self.reject(
                None,
                INVALID_REQUEST,
                "Invalid Request: batch requests (JSON arrays) are not supported",
            )
        else:
            self.reject(None, INVALID_REQUEST, "Invalid Request: expected a JSON object")
        return None

    def answer_oversized(self) -> None:
        """Answer a message skipped for its size that answered no local request."""
        reply = oversized_error(self.max_line_bytes)
        logger.warning("%s: rejected message: %s", self.name, reply["error"]["message"])
        self.send_quietly(reply)

    def reject(self, request_id: RequestId, code: int, message: str, data: Any = None) -> None:
        """Error reply to a message that never became a tracked request."""
        logger.warning("%s: rejected message: %s", self.name, message)
        self.send_quietly(build_error(request_id, code, message, data))

    # ------------------------------------------------------------------ writing

    def send(self, message: Mapping[str, Any]) -> None:
        """Write ``message`` as one message; ``ConnectionClosed`` if the output is closed or
        broken, ``TypeError`` (``orjson.JSONEncodeError``) if it is not serialisable."""
        data = self.encode(message)
        if "method" not in message and ("result" in message or "error" in message):
            answered = message.get("id")
            if valid_id(answered):
                self._answered(answered)
        self.write(data)

    def encode(self, message: Mapping[str, Any]) -> bytes:
        """``message`` as the framing writes it, cut to the limit when it is over it and may be
        cut (``frame_fit``); ``TypeError`` if it is not serialisable.

        A message that cannot be cut goes out whole: the peer's reader is what
        refuses it, as it would any other oversized message.
        """
        data = self._transport.encode(message)
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

    def write(self, data: bytes) -> None:
        """Write one encoded message; ``ConnectionClosed`` once the output is closed or broken."""
        with self._write_lock:
            if self._write_failure is not None:
                raise ConnectionClosed(self._write_failure)
            try:
                self._transport.write(data)
            except (OSError, ValueError) as exc:
                raise self._broken(exc) from exc

    def write_many(self, messages: Sequence[bytes]) -> None:
        """Write encoded messages in order, together (one write on a stream); fails as
        ``write`` does."""
        with self._write_lock:
            if self._write_failure is not None:
                raise ConnectionClosed(self._write_failure)
            try:
                self._transport.write_many(messages)
            except (OSError, ValueError) as exc:
                raise self._broken(exc) from exc

    def send_quietly(self, message: Mapping[str, Any]) -> bool:
        """Encode and write ``message``; a gone peer or unserialisable data is logged, not
        raised (there is nobody to catch it). True if written."""
        try:
            self.send(message)
        except ConnectionClosed as exc:
            logger.info("%s: message not delivered: %s", self.name, exc)
            return False
        except TypeError as exc:
            logger.error("%s: error data is not serialisable: %s", self.name, exc)
            return False
        return True

    def wait_for_room(self, nbytes: int, timeout: float) -> bool:
        """True once ``nbytes`` more can be written without overflowing the framing's buffer;
        a framing whose writes block (a pipe) paces its writer by itself: always True."""
        transport = self._transport
        if isinstance(transport, PacedTransport):
            return transport.wait_for_room(nbytes, timeout)
        return True

    def close(self) -> None:
        """Close the output (the peer sees the end); later writes raise ``ConnectionClosed``."""
        with self._write_lock:
            if self._write_failure is None:
                self._write_failure = "connection closed"
            self._transport.close_output()

    def _broken(self, exc: Exception) -> ConnectionClosed:
        """Close the output for good after a failed write (under the write lock)."""
        self._write_failure = f"cannot write to the peer: {exc}"
        logger.warning("%s: output broken: %s", self.name, exc)
        self._transport.close_output()
        return ConnectionClosed(self._write_failure)
