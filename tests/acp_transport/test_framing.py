"""Line framing: oversized, split, blank and malformed lines, on real pipes."""

from __future__ import annotations

import threading
import tracemalloc
from typing import IO, Any, cast

import pytest

from tests.acp_transport.conftest import RecordingOutput, WireFactory
from tests.acp_transport.test_errors import check_error_shape
from toolprep.runtime.acp.errors import INVALID_REQUEST, PARSE_ERROR
from toolprep.runtime.acp.jsonrpc_connection import JsonRpcConnection
from toolprep.runtime.acp.jsonrpc_transport import DEFAULT_MAX_LINE_BYTES


def _echo(params: Any, request_id: Any) -> Any:
    return params


def _echo_line(request_id: int, payload: str = "") -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"method":"echo","params":["%s"]}' % (
        request_id,
        payload.encode(),
    )


@pytest.mark.parametrize("unbuffered_input", [False, True])
def test_oversized_line_is_rejected_and_the_next_line_served(
    wire: WireFactory, unbuffered_input: bool
) -> None:
    w = wire(max_line_bytes=1024, unbuffered_input=unbuffered_input)
    w.conn.on_request("echo", _echo)
    w.peer.write(_echo_line(1, "x" * 10_000) + b"\n" + _echo_line(2, "ok") + b"\n")
    reply = w.peer.recv()
    check_error_shape(reply)
    assert reply["id"] is None
    assert reply["error"]["code"] == INVALID_REQUEST
    assert "size limit of 1024 bytes" in reply["error"]["message"]
    assert reply["error"]["data"] == {"maxLineBytes": 1024}
    assert w.peer.recv() == {"jsonrpc": "2.0", "id": 2, "result": ["ok"]}


def test_limit_is_inclusive(wire: WireFactory) -> None:
    w = wire(max_line_bytes=200)
    w.conn.on_request("echo", _echo)
    exact = _echo_line(1, "")
    exact = _echo_line(1, "y" * (200 - len(exact)))
    assert len(exact) == 200
    w.peer.write(exact + b"\n")
    assert w.peer.recv()["id"] == 1
    w.peer.write(_echo_line(2, "y" * (201 - len(_echo_line(2)))) + b"\n")
    assert w.peer.recv()["error"]["code"] == INVALID_REQUEST


def test_oversize_is_reported_before_the_line_even_ends(wire: WireFactory) -> None:
    """Rejection happens as soon as the limit is passed: nothing waits for the newline."""
    w = wire(max_line_bytes=4096)
    w.conn.on_request("echo", _echo)
    w.peer.write(b'{"jsonrpc":"2.0","id":1,"method":"echo","params":["' + b"z" * 100_000)
    reply = w.peer.recv()
    assert reply["error"]["code"] == INVALID_REQUEST
    w.peer.write(b"z" * 100_000 + b'"]}\n' + _echo_line(3, "after") + b"\n")
    assert w.peer.recv() == {"jsonrpc": "2.0", "id": 3, "result": ["after"]}


def test_default_limit_rejects_a_line_just_over_8_mib(wire: WireFactory) -> None:
    w = wire()
    assert w.conn.max_line_bytes == DEFAULT_MAX_LINE_BYTES == 8 * 1024 * 1024
    w.conn.on_request("echo", _echo)
    big = b"a" * (DEFAULT_MAX_LINE_BYTES - 100)
    writer = threading.Thread(
        target=w.peer.write,
        args=(_echo_line(1, big.decode()) + b"\n" + big + big + b"\n" + _echo_line(2) + b"\n",),
    )
    writer.start()
    first = w.peer.recv()
    assert first["id"] == 1 and len(first["result"][0]) == len(big)  # under the limit: served
    assert w.peer.recv()["error"]["code"] == INVALID_REQUEST
    assert w.peer.recv()["id"] == 2
    writer.join()


class _EndlessLine:
    """An input stream that sends one line of ``total`` bytes, then a request, then EOF."""

    def __init__(self, total: int, chunk: int = 65536) -> None:
        self.remaining = total
        self.block = b"q" * chunk
        self.tail = b"\n" + _echo_line(1, "tail") + b"\n"

    def read1(self, size: int = -1) -> bytes:
        if self.remaining > 0:
            n = min(self.remaining, len(self.block), size)
            self.remaining -= n
            return self.block if n == len(self.block) else self.block[:n]
        tail, self.tail = self.tail, b""
        return tail


def test_memory_stays_bounded_by_the_limit_not_the_line() -> None:
    """A 64 MiB line with a 1 MiB limit never costs more than a few MiB."""
    sink = RecordingOutput()
    source = cast(IO[bytes], _EndlessLine(64 * 1024 * 1024))
    conn = JsonRpcConnection(source, cast(IO[bytes], sink), max_line_bytes=1024 * 1024)
    conn.on_request("echo", _echo)
    tracemalloc.start()
    try:
        conn.start()
        assert conn.wait_closed(10)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, peak
    assert len(sink.writes) == 2
    assert b"size limit" in sink.writes[0]
    assert sink.writes[1] == b'{"jsonrpc":"2.0","id":1,"result":["tail"]}\n'


def test_malformed_json_then_valid_request_is_answered(wire: WireFactory) -> None:
    w = wire()
    w.conn.on_request("echo", _echo)
    w.peer.write(
        b'{"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {]\n' + _echo_line(2) + b"\n"
    )
    reply = w.peer.recv()
    check_error_shape(reply)
    assert reply["id"] is None and reply["error"]["code"] == PARSE_ERROR
    assert w.peer.recv() == {"jsonrpc": "2.0", "id": 2, "result": [""]}


def test_blank_lines_and_crlf_are_tolerated(wire: WireFactory) -> None:
    w = wire()
    w.conn.on_request("echo", _echo)
    w.peer.write(
        b"\n\n   \n\r\n\t\n" + _echo_line(1, "crlf") + b"\r\n" + b"  " + _echo_line(2) + b"  \n"
    )
    assert w.peer.recv()["id"] == 1
    assert w.peer.recv()["id"] == 2
    assert len(w.peer.raw_lines) == 2  # no reply to the blank lines


def test_message_split_across_many_writes(wire: WireFactory) -> None:
    w = wire(unbuffered_input=True)
    w.conn.on_request("echo", _echo)
    for byte in _echo_line(1, "drip") + b"\n" + _echo_line(2):
        w.peer.write(bytes([byte]))
    w.peer.write(b"\n")
    assert w.peer.recv() == {"jsonrpc": "2.0", "id": 1, "result": ["drip"]}
    assert w.peer.recv()["id"] == 2


def test_last_line_without_newline_is_served_at_eof(wire: WireFactory) -> None:
    w = wire()
    w.conn.on_request("echo", _echo)
    w.peer.write(_echo_line(5, "last"))
    w.peer.close_input()
    assert w.peer.recv() == {"jsonrpc": "2.0", "id": 5, "result": ["last"]}
    assert w.conn.wait_closed(5)


def test_unicode_survives(wire: WireFactory) -> None:
    w = wire()
    w.conn.on_request("echo", _echo)
    w.peer.send({"jsonrpc": "2.0", "id": 1, "method": "echo", "params": ["héllo ✓ 🦀", "\u2028"]})
    assert w.peer.recv()["result"] == ["héllo ✓ 🦀", "\u2028"]
