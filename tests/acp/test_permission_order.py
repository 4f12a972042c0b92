"""A call that needs permission: its card waits ``pending`` and says ``in_progress`` only once
allowed, with the complete arguments; a rejected one never says it ran. Over stdio, both wires."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from acp import text_block

from tests.runtime import scenarios as sc
from tests.support.agent_process import (
    RecordingClient,
    SharedSdkAgents,
    agent_command,
    running_agent,
)
from tests.support.runtime_harness import check_cards, lifecycle
from toolprep.testing import FakeProviderServer

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


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("workers", ["1", "2"])  # the request crosses the worker front in order
@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_in_progress_comes_only_after_the_user_allowed_the_call(
    kind: str, workers: str, tmp_path: Path, shared_sdk_agents: SharedSdkAgents
) -> None:
    shell = sc.shell(COMMAND, "call_sh")
    client = RecordingClient(permission="allow_once")
    conn, server = await shared_sdk_agents.agent(kind, client, "--workers", workers)
    server.enqueue(sc.ok(sc.calls_turn(kind, [shell])), sc.ok(sc.text_turn(kind)))
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


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_a_rejected_call_goes_from_pending_to_failed_with_the_reason(
    kind: str, tmp_path: Path, shared_sdk_agents: SharedSdkAgents
) -> None:
    shell = sc.shell(COMMAND, "call_sh")
    client = RecordingClient(permission="reject_once")
    conn, server = await shared_sdk_agents.agent(kind, client)
    server.enqueue(sc.ok(sc.calls_turn(kind, [shell])), sc.ok(sc.text_turn(kind, "Fine.")))
    session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
    reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
    assert reply.stop_reason == "end_turn"
    assert _card_events(client.raw) == ["pending", "asked", "failed"]
    assert lifecycle(client.frames()) == {"call_sh": ["preparing", "failed"]}
    [failed] = [f for f in client.frames() if f.get("status") == "failed"]
    assert "was not allowed by the user" in str(failed["content"])
    check_cards(client.frames())
    assert not (tmp_path / "ran.txt").exists()


def _asked_for(raw: list[dict[str, Any]]) -> list[str]:
    return [
        m["params"]["toolCall"]["rawInput"]["command"]
        for m in raw
        if m.get("method") == "session/request_permission"
    ]


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_always_allow_is_remembered_for_the_program_until_the_session_closes(
    kind: str, tmp_path: Path
) -> None:
    first = sc.shell("echo one >> ran.txt", "call_1")  # redirection: a compound line
    second = sc.shell("touch two.txt", "call_2")
    third = sc.shell("touch three.txt", "call_3")  # same program: not asked again
    fourth = sc.shell("echo one >> ran.txt", "call_4")  # the exact line again: not asked
    fifth = sc.shell("echo five >> ran.txt", "call_5")  # another compound line: asked
    turns = [[first], [second], [third], [fourth], [fifth]]
    with FakeProviderServer() as server:
        for calls in turns:
            server.enqueue(sc.ok(sc.calls_turn(kind, calls)), sc.ok(sc.text_turn(kind)))
        server.enqueue(sc.ok(sc.calls_turn(kind, [sc.shell("touch six.txt", "call_6")])))
        server.enqueue(sc.ok(sc.text_turn(kind)))
        client = RecordingClient(permission="allow_always")
        async with running_agent(*agent_command(kind, server), client) as (conn, _):
            session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            for _ in turns:
                reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
                assert reply.stop_reason == "end_turn"
            # Another session starts with nothing allowed.
            other = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            await conn.prompt(session_id=other.session_id, prompt=[text_block("go")])
    assert _asked_for(client.raw) == [
        "echo one >> ran.txt",
        "touch two.txt",
        "echo five >> ran.txt",
        "touch six.txt",
    ]
    frames = client.frames()
    assert lifecycle(frames) == {
        f"call_{n}": ["preparing", "in_progress", "completed"] for n in range(1, 7)
    }
    check_cards(frames)
    assert (tmp_path / "ran.txt").read_text() == "one\none\nfive\n"
    assert all((tmp_path / name).exists() for name in ("two.txt", "three.txt", "six.txt"))
