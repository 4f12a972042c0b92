"""Every worker command and event survives the pipe as the same frozen value; anything
else is refused by name."""

from __future__ import annotations

import dataclasses
import io
from typing import Any

import pytest

from toolprep.messages.content import FunctionCall, FunctionCallPart, TextPart, Usage
from toolprep.messages.turns import TurnResult, UserMessage
from toolprep.runtime.kernel.session_host import (
    EditorCapabilities,
    EditorFailed,
    FileRead,
    ReadTextFile,
    RequestPermission,
    SessionConfig,
)
from toolprep.runtime.mcp.specs import StdioServer
from toolprep.runtime.workers.protocol import (
    PROTOCOL_VERSION,
    AnswerEditor,
    AnswerPermission,
    Cancel,
    Close,
    Command,
    ConfigReturned,
    Event,
    FlushJournal,
    Open,
    Prompt,
    ProtocolError,
    Raised,
    Ready,
    Requested,
    Returned,
    ServedElsewhereRaised,
    SetMode,
    SetModel,
    ShowConfig,
    Shutdown,
    ToolGroupChanged,
    TurnEnded,
    UnknownModelRaised,
    Updated,
    decode_command,
    decode_event,
    encode_command,
    encode_event,
)
from toolprep.runtime.workers.wire import FrameReader, encode_frame

EDITOR = EditorCapabilities(read_text_file=True, write_text_file=False)
SERVER = StdioServer("echo", "/usr/bin/python3", ("-m", "echo"), (("TOKEN", "t0k"),))

COMMANDS: list[Command] = [
    Open(1, "s1", "/w", EDITOR, "new"),
    Open(2, "s1", "/w", EDITOR, "restore_or_new", (SERVER,)),
    Prompt(3, "s1", (TextPart("hi"), FunctionCallPart(FunctionCall("c1", "read", {"p": 1})))),
    Prompt(4, "s1", (TextPart("hi"),), UserMessage("msg_1", ({"type": "text", "text": "hi"},))),
    Cancel("s1"),
    Cancel("s1", "no client came back within 60 s"),
    Close("s1"),
    AnswerPermission(5, "s1", "permission_1", "allow_once"),
    AnswerEditor(6, "s1", "fs_1", FileRead("text")),
    AnswerEditor(7, "s1", "fs_2", EditorFailed("no buffer")),
    ShowConfig(8, "s1"),
    FlushJournal(9, "s1"),
    SetModel(10, "s1", "model-b"),
    SetMode(11, "s1", "plan"),
    Shutdown(2.5),
]

EVENTS: list[Event] = [
    Ready(4242),
    Updated("s1", None, b'{"sessionUpdate":"agent_message_chunk"}'),
    Updated("s1", ("c1", "read_file", True), b'{"sessionUpdate":"tool_call_update"}'),
    Requested("s1", RequestPermission("permission_1", {"toolCallId": "c1"})),
    Requested("s1", ReadTextFile("fs_1", "/w/a.py", line=3)),
    ToolGroupChanged(777, True),
    Returned(1, "s1"),
    Returned(2, False),
    Returned(3, None),
    ConfigReturned(4, SessionConfig("model-a", ("model-a", "model-b"), "ask")),
    TurnEnded(5, TurnResult("end_turn", usage=Usage(3, 4))),
    TurnEnded(6, TurnResult(None, error="the provider said no")),
    Raised(7, "mcp_refused", "--allow-mcp-stdio is off"),
    Raised(7, "store_read_only", "database or disk is full"),
    UnknownModelRaised(8, "model-z", ("model-a",)),
    ServedElsewhereRaised(9, "s1", "pid 12 on host"),
]


def _through_a_pipe(frame: tuple[dict[str, Any], bytes]) -> tuple[dict[str, Any], bytes]:
    read = FrameReader(io.BytesIO(encode_frame(*frame))).read()
    assert read is not None
    return read


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: type(c).__name__)
def test_commands_round_trip(command: Command) -> None:
    assert decode_command(*_through_a_pipe(encode_command(command))) == command


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_events_round_trip(event: Event) -> None:
    assert decode_event(*_through_a_pipe(encode_event(event))) == event


def test_every_message_is_a_frozen_slotted_value() -> None:
    for message in [*COMMANDS, *EVENTS]:
        assert not hasattr(message, "__dict__"), message
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(message, dataclasses.fields(message)[0].name, None)


def test_ready_carries_the_protocol_version() -> None:
    header, _ = encode_event(Ready(1))
    assert header == {"type": "ready", "pid": 1, "protocol": PROTOCOL_VERSION}


@pytest.mark.parametrize(
    ("header", "payload", "error"),
    [
        ({"type": "explode"}, b"", "not a worker command"),
        ({"type": "cancel"}, b"", "not a worker command"),
        ({"type": "cancel", "session": 3}, b"", "not a worker command"),
        ({"type": "shutdown", "timeout": "soon"}, b"", "not a worker command"),
        ({"type": "open", "call": 1, "session": "s", "cwd": "/w", "read_text_file": True,
          "write_text_file": True, "how": "somehow", "mcp_servers": []}, b"", "not a worker"),
        ({"type": "prompt", "call": 1, "session": "s"}, b"{not json", "malformed 'prompt'"),
        ({"type": "prompt", "call": 1, "session": "s"}, b'{"parts": 3}', "malformed 'prompt'"),
        ({"type": "set_mode", "call": 1, "session": "s", "mode": "yolo"}, b"", "yolo"),
        ({"type": "answer_permission", "call": 1, "session": "s", "request": "r",
          "outcome": "maybe"}, b"", "maybe"),
        ({"type": "answer_editor", "call": 1, "session": "s", "request": "r",
          "answer": {"type": "shrug"}}, b"", "malformed 'answer_editor'"),
        ({"type": "ready", "pid": 1, "protocol": 2}, b"", "not a worker command"),
    ],
)  # fmt: skip
def test_malformed_commands_are_refused_by_name(
    header: dict[str, Any], payload: bytes, error: str
) -> None:
    with pytest.raises(ProtocolError, match=error):
        decode_command(header, payload)


@pytest.mark.parametrize(
    ("header", "error"),
    [
        ({"type": "gossip"}, "not a worker event"),
        ({"type": "ready", "pid": 7}, "another protocol version"),
        ({"type": "updated", "session": "s", "card": ["c1", "read"]}, "not a worker event"),
        ({"type": "returned", "call": 1, "value": [1, 2]}, "not a worker event"),
        ({"type": "raised", "call": 1, "kind": "sulking", "message": "no"}, "sulking"),
        ({"type": "unknown_model", "call": 1, "model": "m", "models": [1]}, "must be text"),
        ({"type": "turn_ended", "call": 1, "result": {"stop_reason": "bored", "error": None,
          "usage": None}}, "malformed 'turn_ended'"),
        ({"type": "requested", "session": "s", "request": {"type": "delete"}}, "malformed"),
    ],
)  # fmt: skip
def test_malformed_events_are_refused_by_name(header: dict[str, Any], error: str) -> None:
    with pytest.raises(ProtocolError, match=error):
        decode_event(header)
