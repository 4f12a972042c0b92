"""The transport on a real process's stdin/stdout, as an editor launches an agent."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import orjson
import pytest

from tests.acp_transport.conftest import TIMEOUT, echo_agent_command, echo_agent_env
from tests.acp_transport.test_errors import check_error_shape
from tests.support.acp_schema import validate
from toolprep.runtime.acp.errors import ConnectionClosed, RpcError
from toolprep.runtime.acp.jsonrpc_connection import JsonRpcConnection


def _spawn(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        echo_agent_command(*args),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=echo_agent_env(),
    )


def _finish(proc: subprocess.Popen[bytes]) -> tuple[int, str]:
    """Close the agent's stdin (EOF), wait for it, return (status, stderr)."""
    if proc.stdin is not None and not proc.stdin.closed:
        proc.stdin.close()
    try:
        proc.wait(TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    proc.stderr.close()
    if proc.stdout is not None:
        proc.stdout.close()
    return proc.returncode, err


class Session:
    """A client ``JsonRpcConnection`` on the agent subprocess's pipes."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        self.client = JsonRpcConnection(proc.stdout, proc.stdin, name="editor")
        self.updates: list[Any] = []
        self.update_seen = threading.Event()
        self.client.on_notification("session/update", self._on_update)

    def _on_update(self, params: Any) -> None:
        self.updates.append(params)
        self.update_seen.set()

    def call(self, method: str, params: Any = None) -> Any:
        return self.client.request(method, params).result(TIMEOUT)


@pytest.fixture
def session() -> Iterator[Session]:
    s = Session(_spawn())
    yield s
    status, err = _finish(s.proc)
    s.client.close()
    assert status == 0, err
    assert "on_close called" in err


def test_requests_and_errors_over_stdio(session: Session) -> None:
    session.client.start()
    assert session.call("echo", {"protocolVersion": 1}) == {"protocolVersion": 1}
    with pytest.raises(RpcError) as failed:
        session.call("fail", {"code": -32002, "message": "Resource not found: x"})
    assert (failed.value.code, failed.value.message) == (-32002, "Resource not found: x")
    with pytest.raises(RpcError) as params:
        session.call("need_session", {"sessionId": 42})
    assert (params.value.code, params.value.message) == (
        -32602,
        "Invalid params: 'sessionId' must be a string",
    )
    with pytest.raises(RpcError) as crash:
        session.call("crash")
    assert crash.value.code == -32603 and "ValueError: boom" in crash.value.message
    with pytest.raises(RpcError) as missing:
        session.call("session/teleport", {})
    assert (missing.value.code, missing.value.message) == (
        -32601,
        "Method not found: session/teleport",
    )
    assert session.call("noisy") == {"printed": True}  # its print went to stderr


def test_prompt_runs_while_cancel_is_handled(session: Session) -> None:
    session.client.start()
    reply: Future[Any] = session.client.request(
        "session/prompt", {"sessionId": "s1", "prompt": [{"type": "text", "text": "hi"}]}
    )
    assert session.update_seen.wait(TIMEOUT)
    validate("SessionNotification", session.updates[0])
    assert session.call("echo", ["served during the turn"]) == ["served during the turn"]
    assert not reply.done()
    session.client.notify("session/cancel", {"sessionId": "s1"})
    assert reply.result(TIMEOUT) == {"stopReason": "cancelled"}
    validate("PromptResponse", reply.result())


def test_agent_calls_the_client_over_stdio(session: Session) -> None:
    def answer(params: Any, request_id: Any) -> Any:
        if params.get("refuse"):
            raise RpcError(-32000, "Authentication required")
        return {"seen": params}

    session.client.on_request("client/answer", answer)
    session.client.start()
    assert session.call("ask_client", {"q": 1}) == {"client said": {"seen": {"q": 1}}}
    with pytest.raises(RpcError) as refused:
        session.call("ask_client", {"refuse": True})
    assert (refused.value.code, refused.value.message) == (-32000, "Authentication required")


def test_eof_ends_the_agent_and_fails_its_pending_turn(session: Session) -> None:
    session.client.start()
    reply = session.client.request("session/prompt", {"sessionId": "s", "prompt": []})
    assert session.update_seen.wait(TIMEOUT)
    assert session.proc.stdin is not None
    session.proc.stdin.close()  # the editor goes away
    # on_close cancels the turn; its answer still reaches us (our input is still open).
    assert reply.result(TIMEOUT) == {"stopReason": "cancelled"}
    assert session.client.wait_closed(TIMEOUT)  # agent exited: client sees EOF
    assert session.proc.wait(TIMEOUT) == 0


def test_raw_stdout_carries_only_protocol_lines() -> None:
    """Bytes in, bytes out: bad input and stray prints, yet every stdout line is JSON-RPC."""
    proc = _spawn("--max-line-bytes", "2048")
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(
        b"{oops\n"
        + b'{"jsonrpc":"2.0","id":1,"method":"echo","params":["'
        + b"x" * 50_000
        + b'"]}\n'
        + b'{"jsonrpc":"2.0","id":2,"method":"noisy"}\n'
        + b'[{"jsonrpc":"2.0","id":3,"method":"echo"}]\n'
        + b'{"jsonrpc":"2.0","method":"unknown/notification"}\n'
        + b'{"jsonrpc":"2.0","id":4,"method":"echo","params":{"last":true}}\n'
    )
    proc.stdin.close()
    lines = proc.stdout.read().splitlines()
    status, err = _finish(proc)
    assert status == 0, err
    messages = [orjson.loads(line) for line in lines]
    assert [m.get("id") for m in messages] == [None, None, 2, None, 4, None]
    parse, oversized, noisy, batch, last, goodbye = messages
    for error in (parse, oversized, batch):
        check_error_shape(error)
    assert parse["error"]["code"] == -32700
    assert oversized["error"]["code"] == -32600 and "2048 bytes" in oversized["error"]["message"]
    assert noisy["result"] == {"printed": True}
    assert batch["error"]["code"] == -32600 and "batch" in batch["error"]["message"]
    assert last["result"] == {"last": True}
    assert goodbye == {"jsonrpc": "2.0", "method": "goodbye"}
    assert "this must not reach the protocol stream" in err
    assert "on_close called" in err


def test_agent_survives_its_stdout_being_closed() -> None:
    proc = _spawn()
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdout.close()  # the editor stops reading
    for n in range(3):
        proc.stdin.write(b'{"jsonrpc":"2.0","id":%d,"method":"echo","params":[]}\n' % n)
        proc.stdin.flush()
    status, err = _finish(proc)
    assert status == 0, err  # no traceback exit, no status 120 from a failed final flush
    assert "on_close called" in err
    assert "goodbye not delivered: ConnectionClosed" in err
    assert "Traceback" not in err


def test_connection_closed_is_what_a_gone_client_raises() -> None:
    proc = _spawn()
    session = Session(proc)
    session.client.start()
    assert session.call("echo", [1]) == [1]
    status, _ = _finish(proc)
    assert status == 0
    assert session.client.wait_closed(TIMEOUT)
    with pytest.raises(ConnectionClosed):
        session.client.notify("session/cancel", {"sessionId": "s"})
    session.client.close()
