"""What a session records of a prompt: the blocks as sent, and only what the ACP schema allows.

The record is replayed to every client that loads the session, so a field
a client sent malformed must not reach it; and a connection tells its own
prompt's record from its opening bytes, which must not match another id.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson
import pytest

from tests.support.acp_schema import validate, validate_update
from toolprep.messages.frames import user_message_chunk
from toolprep.runtime.acp.own_prompts import OwnPrompts, encoded_prefix
from toolprep.runtime.acp.prompt_content import parse_prompt

WELL_FORMED: list[dict[str, Any]] = [
    {"type": "text", "text": "hi", "annotations": {"priority": 1, "audience": ["user"]}},
    {
        "type": "resource_link",
        "uri": "file:///p/notes.txt",
        "name": "notes.txt",
        "title": "Notes",
        "description": "what we said",
        "mimeType": "text/plain",
        "size": 12,
        "_meta": {"editor": {"selection": [1, 2]}},
    },
    {
        "type": "resource",
        "resource": {"uri": "file:///p/a.py", "text": "x = 1\n", "mimeType": "text/x-python"},
        "annotations": {"lastModified": "2025-01-01T00:00:00Z"},
    },
]


def test_well_formed_blocks_are_recorded_as_sent() -> None:
    recorded = parse_prompt(WELL_FORMED).blocks
    assert list(recorded) == WELL_FORMED
    for block in recorded:
        validate_update(user_message_chunk("msg_1", block))


@pytest.mark.parametrize(
    ("sent", "kept"),
    [
        (
            {
                "type": "text",
                "text": "hi",
                "annotations": {"priority": "high", "audience": ["robot"], "lastModified": 5},
                "_meta": 3,
            },
            {"type": "text", "text": "hi"},
        ),
        (
            {
                "type": "resource_link",
                "uri": "file:///p/n",
                "name": "n",
                "title": 5,
                "size": "big",
                "annotations": {"priority": True, "audience": "user"},
            },
            {"type": "resource_link", "uri": "file:///p/n", "name": "n"},
        ),
        (
            {
                "type": "resource",
                "resource": {"uri": "file:///p/a", "text": "t", "mimeType": 7, "_meta": []},
                "annotations": "important",
            },
            {"type": "resource", "resource": {"uri": "file:///p/a", "text": "t"}},
        ),
    ],
)
def test_malformed_fields_are_left_out_of_the_record(
    sent: dict[str, Any], kept: dict[str, Any]
) -> None:
    with pytest.raises(jsonschema.ValidationError):
        validate("ContentBlock", sent)  # as sent it would break a replay
    [recorded] = parse_prompt([sent]).blocks
    assert recorded == kept
    validate_update(user_message_chunk("msg_1", recorded))


def test_a_prompt_record_is_told_by_its_own_message_id_only() -> None:
    own = OwnPrompts()
    own.sent("sess_a", "msg_1")
    mine = user_message_chunk("msg_1", {"type": "text", "text": "hi"})
    longer_id = user_message_chunk("msg_12", {"type": "text", "text": "hi"})
    answer = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x"}}
    assert orjson.dumps(mine).startswith(encoded_prefix("msg_1"))
    assert own.is_echo("sess_a", mine) and own.is_encoded_echo("sess_a", orjson.dumps(mine))
    for other in (longer_id, answer):
        assert not own.is_echo("sess_a", other)
        assert not own.is_encoded_echo("sess_a", orjson.dumps(other))
    # Another session's record, and the record once the prompt was answered, go through.
    assert not own.is_encoded_echo("sess_b", orjson.dumps(mine))
    own.ended("sess_a", "msg_1")
    assert not own.is_echo("sess_a", mine)
    assert not own.is_encoded_echo("sess_a", orjson.dumps(mine))
