"""The ACP side of toolprep: the JSON-RPC transport, its errors, and the agent on top.

The transport names are re-exported here; the agent (``runtime.acp.agent``)
is not, so importing the transport does not pull in the whole runtime.
"""

from toolprep.runtime.acp.errors import (
    AUTH_REQUIRED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    RESOURCE_NOT_FOUND,
    ConnectionClosed,
    RpcError,
    optional,
    require,
    require_object,
)
from toolprep.runtime.acp.jsonrpc_connection import JsonRpcConnection
from toolprep.runtime.acp.jsonrpc_router import DEFERRED
from toolprep.runtime.acp.jsonrpc_transport import (
    DEFAULT_MAX_LINE_BYTES,
    RequestId,
    build_error,
    build_notification,
    build_request,
    build_response,
)

__all__ = [
    "AUTH_REQUIRED",
    "DEFAULT_MAX_LINE_BYTES",
    "DEFERRED",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "REQUEST_CANCELLED",
    "RESOURCE_NOT_FOUND",
    "ConnectionClosed",
    "JsonRpcConnection",
    "RequestId",
    "RpcError",
    "build_error",
    "build_notification",
    "build_request",
    "build_response",
    "optional",
    "require",
    "require_object",
]
