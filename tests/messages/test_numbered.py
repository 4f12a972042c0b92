"""``numbered``: the number goes last, whatever the frame carried, and reads back from bytes."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from toolprep.messages.frames import META_KEY, numbered, seq_of, seq_of_encoded

FRAMES: list[dict[str, Any]] = [
    {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}},
    {"sessionUpdate": "tool_call", "toolCallId": "c1", "_meta": {"toolName": "read_file"}},
    {"_meta": None, "sessionUpdate": "agent_message_chunk", "content": {"type": "text"}},
    {"_meta": {META_KEY: {"seq": 3}, "x": 1}, "sessionUpdate": "plan", "entries": []},
    {
        "sessionUpdate": "agent_message_chunk",
        "_meta": {META_KEY: {"gap": {"from": 2, "through": 5, "cause": "refused"}}},
    },
]


@pytest.mark.parametrize("frame", FRAMES)
def test_the_number_is_the_last_key_and_reads_back_from_the_encoded_frame(
    frame: dict[str, Any],
) -> None:
    before = orjson.dumps(frame)
    framed = numbered(frame, 41)
    assert orjson.dumps(frame) == before  # the frame given is not changed
    assert list(framed)[-1] == "_meta"
    assert list(framed["_meta"])[-1] == META_KEY
    assert list(framed["_meta"][META_KEY])[-1] == "seq"
    assert seq_of(framed) == 41
    assert seq_of_encoded(orjson.dumps(framed)) == 41
    kept = {k: v for k, v in frame.items() if k != "_meta"}
    assert {k: v for k, v in framed.items() if k != "_meta"} == kept
    their_meta = {k: v for k, v in (frame.get("_meta") or {}).items() if k != META_KEY}
    assert {k: v for k, v in framed["_meta"].items() if k != META_KEY} == their_meta
