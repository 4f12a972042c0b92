"""Requests, notifications, deferred answers and outgoing requests over real pipes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest

from tests.acp_transport.conftest import TIMEOUT, WireFactory
from toolprep.runtime.acp.errors import (
    INTERNAL_ERROR,
    REQUEST_CANCELLED,
    ConnectionClosed,
    RpcError,
    require,
)
from toolprep.runtime.acp.jsonrpc_connection import JsonRpcConnection
from toolprep.runtime.acp.jsonrpc_router import DEFERRED
from toolprep.runtime.acp.jsonrpc_transport import build_error, build_response

Linked = Callable[..., tuple[JsonRpcConnection, JsonRpcConnection]]


def _echo(params: Any, request_id: Any) -> Any:
    return params


class WatchedFuture(Future[Any]):
    """A future that tells when someone starts waiting for it (``watched``)."""

    def __init__(self) -> None:
        super().__init__()
        self.watched = threading.Event()

    def add_done_callback(self, fn: Callable[[Future[Any]], object]) -> None:
        super().add_done_callback(fn)
        self.watched.set()


def test_request_gets_its_result_as_one_compact_line(wire: WireFactory) -> None:
    w = wire()
    w.conn.on_request("echo", _echo)
    w.peer.send({"jsonrpc": "2.0", "id": 7, "method": "echo", "params": {"a": [1, 2]}})
    assert w.peer.recv() == {"jsonrpc": "2.0", "id": 7, "result": {"a": [1, 2]}}
    assert w.peer.raw_lines == [b'{"jsonrpc":"2.0","id":7,"result":{"a":[1,2]}}\n']


@pytest.mark.parametrize("request_id", ["abc", 0, -5, 2**63 - 1, None])
def test_any_valid_id_is_echoed(wire: WireFactory, request_id: Any) -> None:
    w = wire()
    w.conn.on_request("echo", _echo)
    w.peer.send({"jsonrpc": "2.0", "id": request_id, "method": "echo", "params": [1]})
    assert w.peer.recv() == {"jsonrpc": "2.0", "id": request_id, "result": [1]}


def test_handler_gets_params_and_id_and_none_without_params(wire: WireFactory) -> None:
    w = wire()
    seen: list[tuple[Any, Any]] = []

    def record(params: Any, request_id: Any) -> Any:
        seen.append((params, request_id))
        return None

    w.conn.on_request("record", record)
    w.peer.send({"jsonrpc": "2.0", "id": "x", "method": "record"})
    assert w.peer.recv() == {"jsonrpc": "2.0", "id": "x", "result": None}
    assert seen == [(None, "x")]


def test_notifications_reach_their_handler_and_get_no_reply(wire: WireFactory) -> None:
    w = wire()
    got: list[Any] = []
    w.conn.on_notification("session/cancel", got.append)
    w.conn.on_request("echo", _echo)
    w.peer.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s"}})
    w.peer.send({"jsonrpc": "2.0", "method": "no/such/notification", "params": {}})
    w.peer.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 1}})
    w.peer.send({"jsonrpc": "2.0", "id": 1, "method": "echo", "params": ["after"]})
    # In order, and nothing was written for the notifications: the next line is the echo.
    assert w.peer.recv()["result"] == ["after"]
    assert got == [{"sessionId": "s"}]


def test_failing_notification_handler_does_not_stop_the_reader(wire: WireFactory) -> None:
    w = wire()

    def explode(params: Any) -> None:
        raise RuntimeError("handler bug")

    w.conn.on_notification("bad", explode)
    w.conn.on_request("echo", _echo)
    w.peer.send({"jsonrpc": "2.0", "method": "bad"})
    w.peer.send({"jsonrpc": "2.0", "id": 2, "method": "echo", "params": ["still here"]})
    assert w.peer.recv() == {"jsonrpc": "2.0", "id": 2, "result": ["still here"]}


def test_deferred_future_while_cancel_and_other_requests_are_served(wire: WireFactory) -> None:
    """A long prompt must not block the reader: cancel and other requests go through."""
    w = wire()
    turns: dict[str, Future[Any]] = {}
    cancel_thread: list[str] = []

    def prompt(params: Any, request_id: Any) -> Future[Any]:
        turn: Future[Any] = Future()
        turns[require(params, "sessionId", str)] = turn
        return turn

    def cancel(params: Any) -> None:
        cancel_thread.append(threading.current_thread().name)
        turns.pop(params["sessionId"]).set_result({"stopReason": "cancelled"})

    w.conn.on_request("session/prompt", prompt)
    w.conn.on_notification("session/cancel", cancel)
    w.conn.on_request("echo", _echo)
    w.peer.send(
        {"jsonrpc": "2.0", "id": 1, "method": "session/prompt", "params": {"sessionId": "s1"}}
    )
    w.peer.send({"jsonrpc": "2.0", "id": 2, "method": "echo", "params": ["meanwhile"]})
    assert w.peer.recv() == {"jsonrpc": "2.0", "id": 2, "result": ["meanwhile"]}
    w.peer.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s1"}})
    assert w.peer.recv() == {"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "cancelled"}}
    assert cancel_thread and cancel_thread[0].endswith("-reader")


def test_cancel_right_behind_the_prompt_is_seen_after_it(wire: WireFactory) -> None:
    """Inline dispatch keeps wire order: the prompt has registered its turn before the cancel."""
    w = wire()
    turns: dict[str, Future[Any]] = {}
    missed: list[str] = []
    burst_sent = threading.Event()

    def prompt(params: Any, request_id: Any) -> Future[Any]:
        # The turn is set up with its cancel already on the wire, waiting to be read.
        assert burst_sent.wait(TIMEOUT)
        turn: Future[Any] = Future()
        turns[params["sessionId"]] = turn
        return turn

    def cancel(params: Any) -> None:
        turn = turns.pop(params["sessionId"], None)
        if turn is None:
            missed.append(params["sessionId"])
        else:
            turn.set_result({"stopReason": "cancelled"})

    w.conn.on_request("session/prompt", prompt)
    w.conn.on_notification("session/cancel", cancel)
    burst = b""
    for n in range(50):
        burst += (
            b'{"jsonrpc":"2.0","id":%d,"method":"session/prompt","params":{"sessionId":"s%d"}}\n'
            % (n, n)
        )
        burst += b'{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s%d"}}\n' % n
    w.peer.write(burst)  # well within a pipe's buffer: written whole before any is read back
    burst_sent.set()
    answers = {w.peer.recv()["id"] for _ in range(50)}
    assert answers == set(range(50))
    assert missed == []


def test_deferred_sentinel_lets_another_thread_answer_in_order(wire: WireFactory) -> None:
    w = wire()
    done = threading.Event()
    second_answer: list[bool] = []

    def prompt(params: Any, request_id: Any) -> Any:
        def run_turn() -> None:
            for n in range(3):
                w.conn.notify("session/update", {"sessionId": "s", "n": n})
            w.conn.send(w.conn.build_response(request_id, {"stopReason": "end_turn"}))
            second_answer.append(w.conn.respond(request_id, {"stopReason": "again"}))
            done.set()

        threading.Thread(target=run_turn).start()
        return DEFERRED

    w.conn.on_request("session/prompt", prompt)
    w.peer.send({"jsonrpc": "2.0", "id": 9, "method": "session/prompt", "params": {}})
    frames = [w.peer.recv() for _ in range(4)]
    assert [f.get("params", {}).get("n") for f in frames[:3]] == [0, 1, 2]
    assert frames[3] == {"jsonrpc": "2.0", "id": 9, "result": {"stopReason": "end_turn"}}
    assert done.wait(TIMEOUT)
    assert second_answer == [False]  # answered exactly once


def test_respond_error_from_a_deferred_handler(wire: WireFactory) -> None:
    w = wire()
    w.conn.on_request("session/load", lambda params, request_id: DEFERRED)
    w.conn.on_request("echo", _echo)
    w.peer.send({"jsonrpc": "2.0", "id": "L", "method": "session/load", "params": {}})
    # Handlers run in wire order: once the echo is answered, the load handler has returned
    # DEFERRED and left the request open, so the error below comes from outside any handler.
    w.peer.send({"jsonrpc": "2.0", "id": "E", "method": "echo", "params": ["next"]})
    assert w.peer.recv() == {"jsonrpc": "2.0", "id": "E", "result": ["next"]}
    answered = threading.Thread(
        target=w.conn.respond_error, args=("L", -32002, "Session not found: s")
    )
    answered.start()
    answered.join(TIMEOUT)
    assert w.peer.recv() == {
        "jsonrpc": "2.0",
        "id": "L",
        "error": {"code": -32002, "message": "Session not found: s"},
    }


@pytest.mark.parametrize(
    ("outcome", "error"),
    [
        (
            RpcError(-32000, "Authentication required", {"why": "token"}),
            {"code": -32000, "message": "Authentication required", "data": {"why": "token"}},
        ),
        (
            KeyError("gone"),
            {"code": INTERNAL_ERROR, "message": "Internal error in m: KeyError: 'gone'"},
        ),
        ("cancel", {"code": REQUEST_CANCELLED, "message": "Request cancelled"}),
    ],
)
def test_future_failures_become_error_responses(
    wire: WireFactory, outcome: Any, error: dict[str, Any]
) -> None:
    w = wire()
    future = WatchedFuture()
    w.conn.on_request("m", lambda params, request_id: future)
    w.peer.send({"jsonrpc": "2.0", "id": 3, "method": "m"})
    assert future.watched.wait(TIMEOUT)  # still pending when the connection took it up
    if outcome == "cancel":
        assert future.cancel()
    else:
        future.set_exception(outcome)
    assert w.peer.recv() == {"jsonrpc": "2.0", "id": 3, "error": error}


def test_already_done_future_is_answered_at_once(wire: WireFactory) -> None:
    w = wire()
    done: Future[Any] = Future()
    done.set_result({"ok": True})
    w.conn.on_request("m", lambda params, request_id: done)
    w.peer.send({"jsonrpc": "2.0", "id": 1, "method": "m"})
    assert w.peer.recv() == {"jsonrpc": "2.0", "id": 1, "result": {"ok": True}}


def test_unserialisable_result_is_an_internal_error(wire: WireFactory) -> None:
    w = wire()
    w.conn.on_request("m", lambda params, request_id: {"oops": object()})
    w.peer.send({"jsonrpc": "2.0", "id": 1, "method": "m"})
    reply = w.peer.recv()
    assert reply["id"] == 1 and reply["error"]["code"] == INTERNAL_ERROR
    assert "not JSON-serialisable" in reply["error"]["message"]


def test_builders() -> None:
    assert build_response(1, None) == {"jsonrpc": "2.0", "id": 1, "result": None}
    assert build_error("a", -32601, "Method not found: x") == {
        "jsonrpc": "2.0",
        "id": "a",
        "error": {"code": -32601, "message": "Method not found: x"},
    }
    assert build_error(None, -1, "m", [1])["error"]["data"] == [1]


# ---------------------------------------------------------------- outgoing requests


def test_outgoing_request_round_trip_and_error(linked: Linked) -> None:
    client, agent = linked()

    def read_file(params: Any, request_id: Any) -> Any:
        if params["path"] == "/missing":
            raise RpcError(-32002, "Resource not found: /missing", {"path": "/missing"})
        return {"content": f"text of {params['path']}"}

    client.on_request("fs/read_text_file", read_file)
    client.start()
    agent.start()
    ok = agent.request("fs/read_text_file", {"sessionId": "s", "path": "/a"})
    bad = agent.request("fs/read_text_file", {"sessionId": "s", "path": "/missing"})
    unknown = agent.request("no/such/method")
    assert ok.result(TIMEOUT) == {"content": "text of /a"}
    with pytest.raises(RpcError) as caught:
        bad.result(TIMEOUT)
    assert (caught.value.code, caught.value.message, caught.value.data) == (
        -32002,
        "Resource not found: /missing",
        {"path": "/missing"},
    )
    with pytest.raises(RpcError) as missing:
        unknown.result(TIMEOUT)
    assert missing.value.code == -32601 and "no/such/method" in missing.value.message


def test_outgoing_ids_are_unique_ints(wire: WireFactory) -> None:
    w = wire()
    futures = [w.conn.request("client/thing", {"n": n}) for n in range(20)]
    sent = [w.peer.recv() for _ in range(20)]
    ids = [m["id"] for m in sent]
    assert len(set(ids)) == 20 and all(isinstance(i, int) for i in ids)
    assert all(m["jsonrpc"] == "2.0" and m["method"] == "client/thing" for m in sent)
    for message in reversed(sent):  # answered out of order: routed by id
        w.peer.send({"jsonrpc": "2.0", "id": message["id"], "result": message["params"]["n"]})
    assert [f.result(TIMEOUT) for f in futures] == list(range(20))


def test_notify_omits_absent_params(wire: WireFactory) -> None:
    w = wire()
    w.conn.notify("ping")
    w.conn.notify("session/update", {"sessionId": "s"})
    assert w.peer.recv() == {"jsonrpc": "2.0", "method": "ping"}
    assert w.peer.recv() == {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": "s"},
    }


def test_malformed_error_response_and_unknown_ids(wire: WireFactory) -> None:
    w = wire()
    w.conn.on_request("echo", _echo)
    future = w.conn.request("client/x")
    sent = w.peer.recv()
    w.peer.send({"jsonrpc": "2.0", "id": 999, "result": "nobody asked"})
    w.peer.send({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}})
    w.peer.send({"jsonrpc": "2.0", "id": sent["id"], "error": "not an object"})
    with pytest.raises(RpcError) as caught:
        future.result(TIMEOUT)
    assert (
        caught.value.code == INTERNAL_ERROR and "Malformed error response" in caught.value.message
    )
    # Responses are never answered (two peers would bounce errors forever): next line is the echo.
    w.peer.send({"jsonrpc": "2.0", "id": 1, "method": "echo", "params": ["sync"]})
    assert w.peer.recv() == {"jsonrpc": "2.0", "id": 1, "result": ["sync"]}


def test_caller_may_cancel_an_outgoing_future(wire: WireFactory) -> None:
    w = wire()
    w.conn.on_request("echo", _echo)
    future = w.conn.request("client/slow")
    sent = w.peer.recv()
    assert future.cancel()
    w.peer.send({"jsonrpc": "2.0", "id": sent["id"], "result": "late"})
    w.peer.send({"jsonrpc": "2.0", "id": 1, "method": "echo", "params": ["alive"]})
    assert w.peer.recv()["result"] == ["alive"]
    assert future.cancelled()


def test_waiting_on_a_response_inside_an_inline_handler_fails_instead_of_hanging(
    wire: WireFactory,
) -> None:
    w = wire()

    def blocking(params: Any, request_id: Any) -> Any:
        return w.conn.request("client/answer").result(timeout=TIMEOUT)

    w.conn.on_request("blocking", blocking)
    w.peer.send({"jsonrpc": "2.0", "id": 1, "method": "blocking"})
    messages = [w.peer.recv(), w.peer.recv()]
    error = next(m for m in messages if "error" in m)
    assert error["id"] == 1 and error["error"]["code"] == INTERNAL_ERROR
    assert "deadlock" in error["error"]["message"]


def test_pool_mode_lets_handlers_block_on_the_client(linked: Linked) -> None:
    client, agent = linked(request_workers=4)
    client.on_request("client/answer", lambda params, request_id: params["n"] * 2)

    def ask(params: Any, request_id: Any) -> Any:
        return {"doubled": agent.request("client/answer", params).result(timeout=TIMEOUT)}

    agent.on_request("ask", ask)
    client.start()
    agent.start()
    futures = [client.request("ask", {"n": n}) for n in range(8)]
    assert [f.result(TIMEOUT) for f in futures] == [{"doubled": 2 * n} for n in range(8)]


def test_request_after_close_fails_its_future(wire: WireFactory) -> None:
    w = wire()
    w.conn.close()
    future = w.conn.request("client/x")
    assert isinstance(future.exception(TIMEOUT), ConnectionClosed)
    with pytest.raises(ConnectionClosed):
        w.conn.notify("x")
    assert w.conn.respond(1, "nobody") is False
