"""The connection's two parts on their own: the transport's reading and writing, the router's
dispatch and its requests in progress. The rest of this directory drives them through
``JsonRpcConnection``; these pin the contract each part gives the connection."""

from __future__ import annotations

import io
from typing import IO, Any, cast

import orjson

from tests.acp_transport.conftest import RecordingOutput
from toolprep.runtime.acp.errors import INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, RpcError
from toolprep.runtime.acp.jsonrpc_router import CANCEL_REQUEST, JsonRpcRouter
from toolprep.runtime.acp.jsonrpc_transport import JsonRpcTransport
from toolprep.runtime.acp.line_transport import LineTransport


def _transport(output: RecordingOutput, answered: list[Any], limit: int = 1024) -> JsonRpcTransport:
    framing = LineTransport(io.BytesIO(), cast(IO[bytes], output), limit)
    return JsonRpcTransport(framing, "t", answered.append)


def _written(output: RecordingOutput) -> list[Any]:
    return [orjson.loads(line) for write in output.writes for line in write.splitlines()]


def test_the_transport_hands_on_objects_and_answers_what_is_not_one() -> None:
    output = RecordingOutput()
    wire = _transport(output, [])
    assert wire.decode(b'{"jsonrpc":"2.0","method":"m"}') == {"jsonrpc": "2.0", "method": "m"}
    assert wire.decode(b"  \r") is None
    assert wire.decode(b"[1]") is None
    assert wire.decode(b"{nope") is None
    wire.answer_oversized()
    codes = [message["error"]["code"] for message in _written(output)]
    assert codes == [INVALID_REQUEST, -32700, INVALID_REQUEST]
    assert _written(output)[2]["error"]["data"] == {"maxLineBytes": 1024}


def test_the_transport_reports_each_response_it_writes_before_writing_it() -> None:
    output = RecordingOutput()
    answered: list[Any] = []
    wire = _transport(output, answered)
    wire.send({"jsonrpc": "2.0", "method": "n"})
    wire.send({"jsonrpc": "2.0", "id": "a", "result": None})
    wire.send_quietly({"jsonrpc": "2.0", "id": 7, "error": {"code": 1, "message": "x"}})
    assert answered == ["a", 7]
    assert len(_written(output)) == 3


def test_the_transport_cuts_a_notification_over_the_limit_to_fit() -> None:
    output = RecordingOutput()
    wire = _transport(output, [], limit=2048)
    update = {"sessionUpdate": "tool_call_update", "toolCallId": "c", "rawOutput": "x" * 10_000}
    wire.write_many(
        [
            wire.encode(
                {
                    "jsonrpc": "2.0",
                    "method": "session/update",
                    "params": {"sessionId": "s", "update": update},
                }
            )
        ]
    )
    [written] = output.writes
    assert len(written) - 1 <= 2048


def test_the_router_runs_handlers_and_answers_what_nobody_serves() -> None:
    answers: list[tuple[Any, ...]] = []

    def respond(request_id: Any, result: Any) -> bool:
        answers.append(("result", request_id, result))
        return router.claim(request_id)

    def respond_error(request_id: Any, code: int, message: str, data: Any = None) -> bool:
        answers.append(("error", request_id, code))
        return router.claim(request_id)

    def reject(request_id: Any, code: int, message: str, data: Any = None) -> None:
        answers.append(("rejected", request_id, code))

    def bad_params(params: Any, request_id: Any) -> Any:
        raise RpcError(INVALID_PARAMS, "Invalid params: 'x' must be a string")

    router = JsonRpcRouter(respond, respond_error, reject, request_workers=0, name="r")
    router.on_request("echo", lambda params, request_id: params)
    router.on_request("bad", bad_params)
    router.route({"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {"a": 1}})
    router.route({"jsonrpc": "2.0", "id": 2, "method": "missing"})
    router.route({"jsonrpc": "2.0", "id": 3, "method": "bad", "params": {}})
    router.route({"jsonrpc": "1.0", "id": 4, "method": "echo"})
    assert answers == [
        ("result", 1, {"a": 1}),
        ("error", 2, METHOD_NOT_FOUND),
        ("error", 3, INVALID_PARAMS),
        ("rejected", 4, INVALID_REQUEST),
    ]


def test_the_router_keeps_requests_in_progress_until_answered() -> None:
    rejected: list[Any] = []
    cancelled: list[str] = []

    def reject(request_id: Any, code: int, message: str, data: Any = None) -> None:
        rejected.append(data)

    router = JsonRpcRouter(
        lambda request_id, result: True,
        lambda request_id, code, message, data=None: True,
        reject,
        request_workers=0,
        name="r",
    )
    router.on_request("later", lambda params, request_id: None)
    router.route({"jsonrpc": "2.0", "id": "p", "method": "later"})
    router.on_cancel_request("p", lambda: cancelled.append("p"))
    router.route({"jsonrpc": "2.0", "id": "p", "method": "later"})
    assert rejected == [{"id": "p"}], "an id in progress is refused"
    router.route({"jsonrpc": "2.0", "method": CANCEL_REQUEST, "params": {"requestId": "p"}})
    assert cancelled == ["p"]
    assert router.claim("p") is True
    assert router.claim("p") is False, "a request is answered once"
