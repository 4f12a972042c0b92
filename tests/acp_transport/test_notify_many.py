"""Notifications written together: in order, one line each, in one write of the stream."""

from __future__ import annotations

import io
import os
from typing import IO, cast

import orjson
import pytest

from tests.acp_transport.conftest import RecordingOutput
from toolprep.runtime.acp.errors import ConnectionClosed
from toolprep.runtime.acp.jsonrpc_connection import JsonRpcConnection


def _connection(output: object) -> JsonRpcConnection:
    return JsonRpcConnection(io.BytesIO(), cast(IO[bytes], output))


def test_several_notifications_go_out_in_order_in_one_write() -> None:
    output = RecordingOutput()
    connection = _connection(output)
    connection.notify_many("session/update", [{"n": 1}, {"n": 2}, {"n": 3}])
    [written] = output.writes
    lines = written.splitlines()
    assert [orjson.loads(line) for line in lines] == [
        {"jsonrpc": "2.0", "method": "session/update", "params": {"n": n}} for n in (1, 2, 3)
    ]
    connection.notify_many("session/update", [])
    assert len(output.writes) == 1, "nothing to send is no write"


def test_notifications_written_together_to_a_closed_peer_fail_like_one() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    with os.fdopen(write_end, "wb") as output:
        connection = _connection(output)
        with pytest.raises(ConnectionClosed, match="cannot write to the peer"):
            connection.notify_many("session/update", [{"n": 1}, {"n": 2}])
        with pytest.raises(ConnectionClosed):
            connection.notify("session/update", {"n": 3})
