"""The ACP agent's sink relays a frame a host serialised elsewhere without encoding it again."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

import orjson

from tests.session_host.hosts import HostUnderTest
from toolprep.runtime.acp.connection_sink import ConnectionSink
from toolprep.runtime.acp.jsonrpc_connection import JsonRpcConnection

FRAME = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}


@contextmanager
def _connection() -> Iterator[tuple[JsonRpcConnection, IO[bytes]]]:
    """A connection whose output the test reads; its input stays silent (never started)."""
    out_r, out_w = os.pipe()
    in_r, in_w = os.pipe()
    with (
        open(out_r, "rb") as written,
        open(out_w, "wb") as output,
        open(in_r, "rb") as silent,
        open(in_w, "wb"),
    ):
        connection = JsonRpcConnection(silent, output)
        try:
            yield connection, written
        finally:
            connection.close()


def test_an_encoded_frame_goes_out_byte_for_byte_in_the_same_notification(
    hosted: HostUnderTest,
) -> None:
    # Spacing orjson would never write: if it shows up, the bytes were not re-encoded.
    encoded = b'{"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}'
    with _connection() as (connection, written):
        sink = ConnectionSink(connection, hosted.host)
        sink.send_update("sess_a", FRAME)
        sink.send_encoded_update("sess_a", encoded)
        from_dict = written.readline()
        from_bytes = written.readline()
    assert orjson.loads(from_bytes) == orjson.loads(from_dict)
    assert orjson.loads(from_dict) == {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": "sess_a", "update": FRAME},
    }
    assert encoded in from_bytes
