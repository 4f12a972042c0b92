"""A call that needs permission: its card waits ``pending`` and says ``in_progress`` only once
allowed, with the complete arguments; a rejected one never says it ran. Over stdio, both wires."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from acp import text_block

from tests.acp.conftest import RecordingClient, agent_command, running_agent
from tests.runtime import scenarios as sc
from tests.support.fake_provider import FakeProviderServer
from tests.support.runtime_harness import check_cards, lifecycle

COMMAND = "echo allowed > ran.txt"


def _card_events(raw: list[dict[str, Any]]) -> list[str]:
    """The card's statuses and the permission request, in the order the client got them."""
    events = []
    for message in raw:
        if message.get("method") == "session/request_permission":
            events.append("asked")
        elif message.get("method") == "session/update":
            update = message["params"]["update"]
            if update.get("toolCallId") == "call_sh":
                events.append(update["status"])
    return events


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_in_progress_comes_only_after_the_user_allowed_the_call(
    kind: str, tmp_path: Path
) -> None:
    shell = sc.shell(COMMAND, "call_sh")
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.calls_turn(kind, [shell])), sc.ok(sc.text_turn(kind)))
        client = RecordingClient(permission="allow_once")
        async with running_agent(*agent_command(kind, server), client) as (conn, _):
            session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
        assert reply.stop_reason == "end_turn"
        assert _card_events(client.raw) == ["pending", "asked", "in_progress", "completed"]
        [asked] = [m for m in client.raw if m.get("method") == "session/request_permission"]
        assert asked["params"]["toolCall"]["status"] == "pending"
        assert asked["params"]["toolCall"]["rawInput"] == {"command": COMMAND}
        [started] = [f for f in client.frames() if f.get("status") == "in_progress"]
        assert started["rawInput"] == {"command": COMMAND}  # the complete arguments
        check_cards(client.frames())
        assert (tmp_path / "ran.txt").read_text() == "allowed\n"


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_a_rejected_call_goes_from_pending_to_failed_with_the_reason(
    kind: str, tmp_path: Path
) -> None:
    shell = sc.shell(COMMAND, "call_sh")
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.calls_turn(kind, [shell])), sc.ok(sc.text_turn(kind, "Fine.")))
        client = RecordingClient(permission="reject_once")
        async with running_agent(*agent_command(kind, server), client) as (conn, _):
            session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
        assert reply.stop_reason == "end_turn"
        assert _card_events(client.raw) == ["pending", "asked", "failed"]
        assert lifecycle(client.frames()) == {"call_sh": ["preparing", "failed"]}
        [failed] = [f for f in client.frames() if f.get("status") == "failed"]
        assert "was not allowed by the user" in str(failed["content"])
        check_cards(client.frames())
        assert not (tmp_path / "ran.txt").exists()
