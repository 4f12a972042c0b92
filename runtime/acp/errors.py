"""JSON-RPC 2.0 error codes, the error handlers raise, and a tiny params validator.

Handlers signal a protocol-level failure by raising :class:`RpcError`; the
connection turns it into an error response with exactly that code, so the
editor can tell "you sent a bad request" (-326xx) from "the agent broke"
(-32603). The ``require*`` helpers exist so every handler names the
offending field the same way (``Invalid params: 'sessionId' must be a
string``) instead of each one inventing its own wording.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar, cast

__all__ = [
    "AUTH_REQUIRED",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "MODEL_REQUEST_FAILED",
    "PARSE_ERROR",
    "REQUEST_CANCELLED",
    "RESOURCE_NOT_FOUND",
    "ConnectionClosed",
    "RpcError",
    "optional",
    "require",
    "require_object",
]

# JSON-RPC 2.0 standard codes.
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
# ACP-specific codes (see the schema's ``ErrorCode``).
REQUEST_CANCELLED: Final = -32800
AUTH_REQUIRED: Final = -32000
RESOURCE_NOT_FOUND: Final = -32002
# toolprep's own, in the range JSON-RPC leaves to implementations.
MODEL_REQUEST_FAILED: Final = -32010
"""A prompt's turn ended because the model request failed (the provider refused it, or
retries ran out): not the agent's internal error, so editors can say what happened."""

T = TypeVar("T")


class RpcError(Exception):
    """A JSON-RPC error: raised by handlers, and set on futures of failed outgoing requests.

    The same class serves both directions so code that calls the client
    (``conn.request(...)``) and code that serves it handle errors alike.
    """

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_dict(self) -> dict[str, Any]:
        """The JSON-RPC ``error`` member; ``data`` is omitted when it is ``None``."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error

    def __repr__(self) -> str:
        return f"RpcError({self.code}, {self.message!r}, data={self.data!r})"


class ConnectionClosed(Exception):
    """The peer is gone: input reached EOF, the output pipe broke, or ``close()`` was called.

    A distinct type so callers can stop a turn quietly instead of treating a
    vanished editor as a crash.
    """


_KIND_NAMES: dict[type, str] = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    dict: "an object",
    list: "an array",
}


def _kind_name(kind: type) -> str:
    return _KIND_NAMES.get(kind, f"of type {kind.__name__}")


def _matches(value: Any, kind: type) -> bool:
    # JSON has no separate boolean-is-an-integer notion: ``true`` is not a number.
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


def require_object(params: Any) -> dict[str, Any]:
    """``params`` as an object, or ``-32602`` (ACP methods always take an object)."""
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "Invalid params: expected an object")
    return params


def require(params: Any, name: str, kind: type[T]) -> T:
    """The field ``name`` of ``params``, which must be present and of JSON type ``kind``.

    Raises ``RpcError(-32602, "Invalid params: 'name' must be a string")``
    (wording follows ``kind``) so the editor's log names the field at fault.
    """
    value = require_object(params).get(name)
    if value is None or not _matches(value, kind):
        raise RpcError(
            INVALID_PARAMS,
            f"Invalid params: '{name}' must be {_kind_name(kind)}",
        )
    return cast(T, value)


def optional(params: Any, name: str, kind: type[T], default: T) -> T:
    """Like :func:`require`, but an absent or ``null`` field yields ``default``."""
    if require_object(params).get(name) is None:
        return default
    return require(params, name, kind)
