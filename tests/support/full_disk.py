"""A turn that fills the disk under the store, and what a replay must show after it: the
scene the full-disk tests of ``toolprep acp`` and ``toolprep serve`` share.

The session's directory is on the small disk too: its second card (a shell command) fills
it, so the card's end is the first write the store refuses, after a card that stored fine.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.runtime import scenarios as sc
from tests.support.message_log import Message, MessageLog
from tests.support.runtime_harness import lifecycle, message_text
from toolprep.messages import frames as fr
from toolprep.testing import FakeProviderServer

__all__ = [
    "KIND",
    "check_replay",
    "completed_live",
    "fill_in_a_turn",
    "is_gap",
    "sqlite_text",
    "unended",
]

KIND = "anthropic"

SQLITE_TEXT = (
    "database or disk is full",
    "disk I/O error",
    "cannot rollback",
    "no transaction is active",
    "readonly database",
    "unable to open database",
    "sqlite",
)
"""What SQLite says, which must never reach a client: the store says why in its own words."""

FILLING = [
    ("call_read", "read_file", {"path": "notes.txt"}),
    # The disk fills under the second card: its end is the first write refused.
    sc.shell("cat /dev/zero > filler.bin 2>/dev/null; echo filled", "call_fill"),
    ("call_after", "read_file", {"path": "notes.txt"}),
    # Its start cannot be stored, so it does not run.
    sc.shell("echo never > never.txt", "call_never"),
]


def is_gap(update: Message) -> bool:
    return fr.gap_of(update) is not None


def unended(replayed: list[Message]) -> list[str]:
    """The cards of ``replayed`` that neither end nor are followed by a gap mark."""
    last_frame: dict[str, int] = {}
    ends = lifecycle(replayed)
    for n, update in enumerate(replayed):
        call_id = update.get("toolCallId")
        if isinstance(call_id, str):
            last_frame[call_id] = n
    marks = [n for n, update in enumerate(replayed) if is_gap(update)]
    return [
        call_id
        for call_id, n in last_frame.items()
        if ends[call_id][-1] not in ("completed", "failed", "discarded")
        and not any(mark > n for mark in marks)
    ]


def sqlite_text(messages: list[Message]) -> list[str]:
    """The SQLite phrases found anywhere in ``messages``."""
    text = orjson.dumps(messages).decode().lower()
    return [said for said in SQLITE_TEXT if said.lower() in text]


def fill_in_a_turn(
    server: FakeProviderServer, client: MessageLog, cwd: Path
) -> tuple[str, list[Message]]:
    """A session (in ``cwd``, holding ``notes.txt``, on the small disk) whose first turn
    stores fine and whose second fills the disk; its id and what the second showed live."""
    server.enqueue(
        sc.ok(sc.calls_turn(KIND, [("call_first", "read_file", {"path": "notes.txt"})])),
        sc.ok(sc.text_turn(KIND, "Read it.")),
        sc.ok(sc.calls_turn(KIND, FILLING)),
        sc.ok(sc.text_turn(KIND, "The disk is full now.")),
    )
    opened = client.reply(client.request("session/new", {"cwd": str(cwd), "mcpServers": []}))
    session_id: str = opened["result"]["sessionId"]
    first = client.reply(client.prompt(session_id, "read"), timeout=60)
    assert first["result"]["stopReason"] == "end_turn", first
    before = len(client.updates(session_id))
    reply = client.reply(client.prompt(session_id, "fill the disk"), timeout=120)
    assert reply["result"]["stopReason"] == "end_turn", reply
    live = client.updates(session_id)[before:]
    ends = lifecycle(live)
    # The scene as staged: cards that completed live after the disk filled, one not run.
    assert ends["call_fill"][-1] == "completed", ends
    assert ends["call_after"][-1] == "completed", ends
    assert ends["call_never"][-1] == "failed", ends
    assert not (cwd / "never.txt").exists()
    assert "could not be saved" in message_text(live), message_text(live)
    return session_id, live


def completed_live(live: list[Message]) -> list[str]:
    return [call_id for call_id, seen in lifecycle(live).items() if seen[-1] == "completed"]


def check_replay(replayed: list[Message], live: list[Message]) -> None:
    """Every card of ``replayed`` ends, and each one ``live`` showed completed is completed."""
    assert not unended(replayed), lifecycle(replayed)
    ends = lifecycle(replayed)
    for call_id in completed_live(live):
        assert ends.get(call_id, ["-"])[-1] == "completed", (call_id, ends)
