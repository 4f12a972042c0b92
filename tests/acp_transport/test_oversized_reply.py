"""A reply over the line limit fails the local request it answers at once, on real pipes."""

from __future__ import annotations

import orjson
import pytest

from tests.acp_transport.conftest import WireFactory
from toolprep.runtime.acp.envelope_scan import EnvelopeScanner
from toolprep.runtime.acp.errors import INVALID_REQUEST
from toolprep.runtime.acp.jsonrpc_connection import OversizedMessage

LIMIT = 4096

MESSAGES = [
    b'{"jsonrpc":"2.0","id":7,"result":{"content":"a\\"b\\\\c\\n}{]["}}',
    b'{"result":{"content":"x"},"jsonrpc":"2.0","id":12}',
    b' { "id" : 3 , "result" : [1,{"a":"]"}], "jsonrpc":"2.0" } ',
    b'{"jsonrpc":"2.0","id":9,"error":{"code":1,"message":"m"}}',
    b'{"jsonrpc":"2.0","id":5,"method":"x","params":{}}',
    b'{"params":{"x":"yyyy"},"id":4,"method":"m"}',
    b'{"jsonrpc":"2.0","id":"s","result":null}',
    b'{"id":true,"result":1}',
    b'{"id":1e3,"result":1}',
    b'{"id":1,"result":1,}',
    b'{"id":1,"result":1}x',
    b"[1,2]",
    b"qqqq",
    b"{}",
]


def _expected_id(line: bytes) -> int | None:
    """What a full parse says: the integer id of a response object, else None."""
    try:
        message = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(message, dict) or "method" in message:
        return None
    value = message.get("id")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@pytest.mark.parametrize("line", MESSAGES)
def test_scanner_agrees_with_a_full_parse_at_every_split(line: bytes) -> None:
    expected = _expected_id(line)
    for cut in range(len(line) + 1):
        for second in {cut, min(cut + 1, len(line)), min(cut + 3, len(line))}:
            scanner = EnvelopeScanner()
            for piece in (line[:cut], line[cut:second], line[second:]):
                scanner.feed(piece)
            assert scanner.response_id() == expected, (cut, second)


def test_scanner_skips_megabytes_quickly() -> None:
    content = 'text with "quotes"\tand \\ escapes\n' * 300_000
    line = orjson.dumps({"jsonrpc": "2.0", "result": {"content": content}, "id": 42})
    scanner = EnvelopeScanner()
    for start in range(0, len(line), 65536):
        scanner.feed(line[start : start + 65536])
    assert scanner.response_id() == 42


def _reply_line(request_id: int, size: int, *, id_first: bool) -> bytes:
    body = b'"result":{"content":"' + b"r" * size + b'"}'
    head = b'{"jsonrpc":"2.0",'
    if id_first:
        return head + b'"id":%d,' % request_id + body + b"}\n"
    return head + body + b',"id":%d}\n' % request_id


@pytest.mark.parametrize("id_first", [True, False])
def test_pending_request_fails_at_once_with_the_sizes(wire: WireFactory, id_first: bool) -> None:
    w = wire(max_line_bytes=LIMIT)
    asked = w.conn.request("fs/read_text_file", {"path": "/big"})
    other = w.conn.request("fs/read_text_file", {"path": "/small"})
    first, second = w.peer.recv(), w.peer.recv()
    line = _reply_line(first["id"], 50_000, id_first=id_first)
    w.peer.write(line + b'{"jsonrpc":"2.0","id":%d,"result":{"content":"ok"}}\n' % second["id"])
    # Failed by the oversized reply itself: a request left pending would time out instead.
    with pytest.raises(OversizedMessage) as err:
        asked.result(timeout=10)
    assert err.value.size == len(line) - 1 and err.value.limit == LIMIT
    assert f"{len(line) - 1 - LIMIT} bytes over the {LIMIT}-byte limit" in str(err.value)
    # The next message on the line is served as usual, and the peer was not sent an error.
    assert other.result(timeout=10) == {"content": "ok"}
    w.conn.notify("ping")
    assert w.peer.recv()["method"] == "ping"


def test_oversized_reply_to_no_pending_request_is_still_rejected(wire: WireFactory) -> None:
    w = wire(max_line_bytes=LIMIT)
    w.peer.write(_reply_line(999, 50_000, id_first=True))
    reply = w.peer.recv()
    assert reply["id"] is None and reply["error"]["code"] == INVALID_REQUEST
