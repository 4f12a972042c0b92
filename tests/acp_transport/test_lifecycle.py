"""EOF, close and broken pipes: the connection ends cleanly and never kills the process."""

from __future__ import annotations

import io
import threading

import pytest

from tests.acp_transport.conftest import TIMEOUT, WireFactory, pipe_pair
from toolprep.runtime.acp.errors import ConnectionClosed
from toolprep.runtime.acp.jsonrpc_connection import JsonRpcConnection


def test_eof_calls_on_close_and_fails_pending_requests(wire: WireFactory) -> None:
    w = wire()
    closed_on: list[str] = []
    w.conn.on_close(lambda: closed_on.append(threading.current_thread().name))
    pending = [w.conn.request("session/request_permission", {"n": n}) for n in range(3)]
    for _ in pending:
        w.peer.recv()
    assert not w.conn.wait_closed(0.05)
    w.peer.close_input()
    assert w.conn.wait_closed(TIMEOUT)
    assert w.conn.closed
    assert len(closed_on) == 1 and closed_on[0].endswith("-reader")
    for future in pending:
        error = future.exception(TIMEOUT)
        assert isinstance(error, ConnectionClosed) and "EOF" in str(error)
    late = w.conn.request("x")
    assert isinstance(late.exception(TIMEOUT), ConnectionClosed)


def test_output_still_works_after_input_eof(wire: WireFactory) -> None:
    """After the editor closes our stdin, cancelled turns still write their last frames."""
    w = wire()
    w.peer.close_input()
    assert w.conn.wait_closed(TIMEOUT)
    w.conn.notify("session/update", {"last": True})
    assert w.peer.recv()["params"] == {"last": True}


def test_on_close_callbacks_run_once_each_even_if_one_fails(wire: WireFactory) -> None:
    w = wire()
    calls: list[str] = []

    def broken() -> None:
        calls.append("broken")
        raise RuntimeError("callback bug")

    w.conn.on_close(broken)
    w.conn.on_close(lambda: calls.append("second"))
    w.peer.close_input()
    assert w.conn.wait_closed(TIMEOUT)
    w.conn.close()
    assert calls == ["broken", "second"]
    w.conn.on_close(lambda: calls.append("late"))  # registered after the fact: runs at once
    assert calls == ["broken", "second", "late"]


def test_close_stops_everything_and_the_peer_sees_eof(wire: WireFactory) -> None:
    w = wire()
    closed = threading.Event()
    w.conn.on_close(closed.set)
    pending = w.conn.request("client/x")
    w.peer.recv()
    w.conn.close()
    assert closed.is_set() and w.conn.closed and w.conn.wait_closed(0)
    assert isinstance(pending.exception(TIMEOUT), ConnectionClosed)
    with pytest.raises(ConnectionClosed):
        w.conn.send({"jsonrpc": "2.0", "method": "x"})
    assert w.peer.at_eof()
    w.conn.close()  # idempotent


def test_context_manager_closes(wire: WireFactory) -> None:
    w = wire()
    with w.conn as conn:
        conn.notify("hello")
    assert w.conn.closed
    assert w.peer.recv()["method"] == "hello"


def test_broken_pipe_on_write_raises_connection_closed() -> None:
    conn_in, peer_out = pipe_pair()
    peer_in, conn_out = pipe_pair()
    peer_in.close()  # the editor stopped reading our output
    conn = JsonRpcConnection(conn_in, conn_out)
    handled = threading.Event()
    conn.on_request("echo", lambda params, request_id: {"fine": True})
    conn.on_notification("note", lambda params: handled.set())
    conn.start()
    try:
        with pytest.raises(ConnectionClosed, match="cannot write to the peer"):
            conn.notify("session/update", {"x": 1})
        with pytest.raises(ConnectionClosed):  # and it stays closed, without retrying
            conn.notify("session/update", {"x": 2})
        assert conn.respond("nobody", 1) is False
        assert isinstance(conn.request("client/x").exception(TIMEOUT), ConnectionClosed)
        # The reader is unaffected: requests are still read, their answers dropped quietly.
        peer_out.write(b'{"jsonrpc":"2.0","id":1,"method":"echo"}\n')
        peer_out.write(b'{"jsonrpc":"2.0","method":"note"}\n')
        peer_out.flush()
        assert handled.wait(TIMEOUT)
        assert not conn.closed
    finally:
        peer_out.close()
        assert conn.wait_closed(TIMEOUT)
        conn.close()
        conn_in.close()


def test_send_rejects_unserialisable_messages_without_breaking(wire: WireFactory) -> None:
    w = wire()
    with pytest.raises(TypeError):
        w.conn.notify("x", {"bad": object()})
    with pytest.raises(TypeError):
        w.conn.request("x", {"bad": {1, 2}})
    w.conn.notify("ok")
    assert w.peer.recv()["method"] == "ok"


def test_start_twice_is_an_error(wire: WireFactory) -> None:
    w = wire()
    with pytest.raises(RuntimeError):
        w.conn.start()


def test_bad_constructor_arguments() -> None:
    with pytest.raises(ValueError):
        JsonRpcConnection(io.BytesIO(), io.BytesIO(), max_line_bytes=0)
    with pytest.raises(ValueError):
        JsonRpcConnection(io.BytesIO(), io.BytesIO(), request_workers=-1)
