"""A card over the connection's message limit goes out cut to fit it, with a note and a marker."""

from __future__ import annotations

from typing import Any

import orjson

from tests.acp_transport.conftest import WireFactory
from tests.support.acp_schema import validate_agent_message

LIMIT = 4096


def _write_card(content: str) -> dict[str, Any]:
    return {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "call_1",
        "status": "in_progress",
        "rawInput": {"path": "big.txt", "content": content},
        "_meta": {"toolName": "write_file", "toolprep": {"seq": 5}},
    }


def _raw_size(line: bytes) -> int:
    return len(line.rstrip(b"\n"))


def test_an_update_over_the_limit_is_cut_with_a_note_and_a_marker(wire: WireFactory) -> None:
    w = wire(max_line_bytes=LIMIT)
    content = "é" * 5000  # two bytes each: the cut counts bytes, not characters
    original = len(orjson.dumps(_notification(_write_card(content))))
    w.conn.notify("session/update", {"sessionId": "sess", "update": _write_card(content)})
    message = w.peer.recv()
    validate_agent_message(message)
    assert _raw_size(w.peer.raw_lines[-1]) <= LIMIT
    update = message["params"]["update"]
    assert update["_meta"]["toolprep"] == {
        "seq": 5,
        "truncated": {"originalBytes": original, "limitBytes": LIMIT},
    }
    kept, note = update["rawInput"]["content"].split("\n[... ")
    assert kept == "é" * len(kept) and len(kept) > 1000
    cut = 2 * (5000 - len(kept))
    assert note == f"{cut} bytes cut here: the message was over the {LIMIT}-byte message limit ...]"
    assert update["rawInput"]["path"] == "big.txt"


def test_an_update_within_the_limit_and_a_response_over_it_go_out_whole(
    wire: WireFactory,
) -> None:
    w = wire(max_line_bytes=LIMIT)
    card = _write_card("z" * 1000)
    w.conn.notify("session/update", {"sessionId": "sess", "update": card})
    assert w.peer.recv()["params"]["update"] == card
    # A reply is never altered: the peer's reader refuses it if it must.
    w.conn.on_request("echo", lambda params, _id: params)
    w.peer.send({"jsonrpc": "2.0", "id": 1, "method": "echo", "params": ["a" * 3000]})
    assert w.peer.recv()["result"] == ["a" * 3000]


def test_a_pre_encoded_update_and_a_batch_are_cut_too(wire: WireFactory) -> None:
    w = wire(max_line_bytes=LIMIT)
    fragment = orjson.Fragment(orjson.dumps(_write_card("q" * 9000)))
    w.conn.notify("session/update", {"sessionId": "sess", "update": fragment})
    w.conn.notify_many(
        "session/update",
        [{"sessionId": "sess", "update": _write_card(c * 9000)} for c in "rs"],
    )
    for expected in "qrs":
        update = w.peer.recv()["params"]["update"]
        assert update["rawInput"]["content"].startswith(expected * 100)
        assert update["_meta"]["toolprep"]["truncated"]["limitBytes"] == LIMIT
    assert max(map(_raw_size, w.peer.raw_lines)) <= LIMIT


def _notification(update: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": "sess", "update": update},
    }
