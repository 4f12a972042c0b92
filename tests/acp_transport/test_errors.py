"""Every JSON-RPC error the transport produces: exact codes, messages naming the culprit,
and the ACP schema's ``Error`` shape."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest

from tests.acp_transport.conftest import Wired, WireFactory
from tests.support.acp_schema import validate
from toolprep.runtime.acp.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    RpcError,
    optional,
    require,
    require_object,
)

KNOWN_CODES = {-32700, -32600, -32601, -32602, -32603, -32800, -32000, -32002}


def check_error_shape(reply: dict[str, Any]) -> None:
    """A failed response as the ACP schema defines it (``AgentResponse`` / ``Error``)."""
    assert set(reply) == {"jsonrpc", "id", "error"}
    assert reply["jsonrpc"] == "2.0"
    validate("AgentResponse", {"id": reply["id"], "error": reply["error"]})
    validate("Error", reply["error"])
    validate("ErrorCode", reply["error"]["code"])
    validate("RequestId", reply["id"])


def _prompt(params: Any, request_id: Any) -> Any:
    return {"sessionId": require(params, "sessionId", str)}


def _boom(params: Any, request_id: Any) -> Any:
    return 1 / 0


def _refuse(params: Any, request_id: Any) -> Any:
    raise RpcError(-32000, "Auth", {"x": 1})


def _serve(wire: WireFactory) -> Wired:
    w = wire()
    w.conn.on_request("echo", lambda params, request_id: params)
    w.conn.on_request("session/prompt", _prompt)
    w.conn.on_request("boom", _boom)
    w.conn.on_request("refuse", _refuse)
    return w


# (raw line, expected id, code, substring the message must contain)
MALFORMED: list[tuple[bytes, Any, int, str]] = [
    (b"{not json", None, PARSE_ERROR, "Parse error"),
    (
        b'{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":"\xff\xfe"}}',
        None,
        PARSE_ERROR,
        "UTF-8",
    ),
    (b'{"jsonrpc":"2.0","id":1,"method":"echo"', None, PARSE_ERROR, "Parse error"),
    (b'[{"jsonrpc":"2.0","id":1,"method":"echo"}]', None, INVALID_REQUEST, "batch"),
    (b"[]", None, INVALID_REQUEST, "batch"),
    (b"42", None, INVALID_REQUEST, "expected a JSON object"),
    (b'"text"', None, INVALID_REQUEST, "expected a JSON object"),
    (b'{"id":5,"method":"echo"}', 5, INVALID_REQUEST, "'jsonrpc' must be \"2.0\""),
    (b'{"jsonrpc":"1.0","id":"a","method":"echo"}', "a", INVALID_REQUEST, "'jsonrpc'"),
    (b'{"jsonrpc":"2.0","id":6,"method":12}', 6, INVALID_REQUEST, "'method' must be a string"),
    (b'{"jsonrpc":"2.0","id":6,"method":null}', 6, INVALID_REQUEST, "'method' must be a string"),
    (b'{"jsonrpc":"2.0","id":8}', 8, INVALID_REQUEST, "missing 'method'"),
    (b'{"jsonrpc":"2.0","id":1.5,"method":"echo"}', None, INVALID_REQUEST, "'id' must be"),
    (b'{"jsonrpc":"2.0","id":true,"method":"echo"}', None, INVALID_REQUEST, "'id' must be"),
    (b'{"jsonrpc":"2.0","id":{"a":1},"method":"echo"}', None, INVALID_REQUEST, "'id' must be"),
    (b'{"jsonrpc":"2.0","id":[1],"method":"echo"}', None, INVALID_REQUEST, "'id' must be"),
    (
        b'{"jsonrpc":"2.0","id":18446744073709551615,"method":"echo"}',
        None,
        INVALID_REQUEST,
        "'id' must be",
    ),
    (
        b'{"jsonrpc":"2.0","id":9,"method":"echo","params":"flat"}',
        9,
        INVALID_REQUEST,
        "'params' must be an object or an array",
    ),
    (b'{"foo":"bar"}', None, INVALID_REQUEST, "'jsonrpc'"),
]


@pytest.mark.parametrize(("line", "reply_id", "code", "needle"), MALFORMED)
def test_malformed_messages_get_exact_codes(
    wire: WireFactory, line: bytes, reply_id: Any, code: int, needle: str
) -> None:
    w = _serve(wire)
    w.peer.write(line + b"\n")
    reply = w.peer.recv()
    check_error_shape(reply)
    assert reply["id"] == reply_id
    assert reply["error"]["code"] == code
    assert needle in reply["error"]["message"]
    # The reader survived: a valid request right after is still answered.
    w.peer.send({"jsonrpc": "2.0", "id": "next", "method": "echo", "params": [1]})
    assert w.peer.recv() == {"jsonrpc": "2.0", "id": "next", "result": [1]}


def test_unknown_method_is_named(wire: WireFactory) -> None:
    w = _serve(wire)
    w.peer.send({"jsonrpc": "2.0", "id": 1, "method": "session/teleport", "params": {}})
    reply = w.peer.recv()
    check_error_shape(reply)
    assert reply["error"] == {
        "code": METHOD_NOT_FOUND,
        "message": "Method not found: session/teleport",
        "data": {"method": "session/teleport"},
    }


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "Invalid params: 'sessionId' must be a string"),
        ({"sessionId": 3}, "Invalid params: 'sessionId' must be a string"),
        ({"sessionId": None}, "Invalid params: 'sessionId' must be a string"),
        (["s"], "Invalid params: expected an object"),
        (None, "Invalid params: expected an object"),
    ],
)
def test_invalid_params_name_the_field(wire: WireFactory, params: Any, message: str) -> None:
    w = _serve(wire)
    request: dict[str, Any] = {"jsonrpc": "2.0", "id": 4, "method": "session/prompt"}
    if params is not None:
        request["params"] = params
    w.peer.send(request)
    reply = w.peer.recv()
    check_error_shape(reply)
    assert reply == {
        "jsonrpc": "2.0",
        "id": 4,
        "error": {"code": INVALID_PARAMS, "message": message},
    }


def test_handler_crash_is_an_internal_error_with_a_message(wire: WireFactory) -> None:
    w = _serve(wire)
    w.peer.send({"jsonrpc": "2.0", "id": 5, "method": "boom"})
    reply = w.peer.recv()
    check_error_shape(reply)
    assert reply["error"] == {
        "code": INTERNAL_ERROR,
        "message": "Internal error in boom: ZeroDivisionError: division by zero",
    }


def test_rpc_error_code_message_and_data_pass_through(wire: WireFactory) -> None:
    w = _serve(wire)
    w.peer.send({"jsonrpc": "2.0", "id": 6, "method": "refuse"})
    reply = w.peer.recv()
    check_error_shape(reply)
    assert reply["error"] == {"code": -32000, "message": "Auth", "data": {"x": 1}}


def test_duplicate_in_flight_id_is_rejected(wire: WireFactory) -> None:
    w = wire()
    w.conn.on_request("slow", lambda params, request_id: Future())
    w.peer.send({"jsonrpc": "2.0", "id": 1, "method": "slow"})
    w.peer.send({"jsonrpc": "2.0", "id": 1, "method": "slow"})
    reply = w.peer.recv()
    check_error_shape(reply)
    assert reply["error"]["code"] == INVALID_REQUEST
    assert "id 1 is already used" in reply["error"]["message"]


@pytest.mark.parametrize(
    "malformed",
    [
        {"jsonrpc": "1.0", "id": 1, "method": "slow"},
        {"jsonrpc": "2.0", "id": 1},
        {"jsonrpc": "2.0", "id": 1, "method": 7},
        {"jsonrpc": "2.0", "id": 1, "method": "slow", "params": "text"},
    ],
)
def test_a_malformed_message_reusing_an_id_in_progress_does_not_answer_that_request(
    wire: WireFactory, malformed: dict[str, Any]
) -> None:
    """The error goes out with a null id: with id 1 the peer would take it for the answer to
    its request 1, and the real answer, coming later, would be dropped as a second one."""
    w = wire()
    pending: Future[Any] = Future()
    w.conn.on_request("slow", lambda params, request_id: pending)
    w.peer.send({"jsonrpc": "2.0", "id": 1, "method": "slow"})
    w.peer.send(malformed)
    rejected = w.peer.recv()
    pending.set_result({"done": True})
    answered = w.peer.recv()

    check_error_shape(rejected)
    assert rejected["id"] is None
    assert rejected["error"]["code"] == INVALID_REQUEST
    assert rejected["error"]["data"] == {"id": 1}
    assert answered == {"jsonrpc": "2.0", "id": 1, "result": {"done": True}}


def test_every_code_produced_is_a_schema_error_code() -> None:
    for code in (PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR):
        assert code in KNOWN_CODES
        validate("Error", RpcError(code, "m").to_dict())


# ---------------------------------------------------------------- params helpers


def test_require_wording_follows_the_json_type() -> None:
    cases: list[tuple[type, Any, str]] = [
        (str, 1, "a string"),
        (int, "1", "an integer"),
        (int, True, "an integer"),  # JSON true is not a number
        (int, 1.5, "an integer"),
        (float, "x", "a number"),
        (bool, 0, "a boolean"),
        (dict, [], "an object"),
        (list, {}, "an array"),
    ]
    for kind, value, wording in cases:
        with pytest.raises(RpcError) as caught:
            require({"f": value}, "f", kind)
        assert caught.value.code == INVALID_PARAMS
        assert caught.value.message == f"Invalid params: 'f' must be {wording}"
        assert caught.value.data is None


def test_require_returns_valid_values() -> None:
    params = {"s": "x", "i": 3, "f": 2, "b": False, "o": {}, "a": []}
    assert require(params, "s", str) == "x"
    assert require(params, "i", int) == 3
    assert require(params, "f", float) == 2
    assert require(params, "b", bool) is False
    assert require(params, "o", dict) == {}
    assert require(params, "a", list) == []
    assert require_object(params) is params


def test_optional_defaults_only_when_absent_or_null() -> None:
    assert optional({}, "mcpServers", list, []) == []
    assert optional({"mcpServers": None}, "mcpServers", list, []) == []
    assert optional({"mcpServers": [1]}, "mcpServers", list, []) == [1]
    with pytest.raises(RpcError, match="'mcpServers' must be an array"):
        optional({"mcpServers": {}}, "mcpServers", list, [])
    with pytest.raises(RpcError, match="expected an object"):
        optional("nope", "x", str, "d")


def test_rpc_error_to_dict_omits_null_data() -> None:
    assert RpcError(-32603, "m").to_dict() == {"code": -32603, "message": "m"}
    assert RpcError(-32603, "m", 0).to_dict() == {"code": -32603, "message": "m", "data": 0}
    assert "RpcError(-32603" in repr(RpcError(-32603, "m"))
