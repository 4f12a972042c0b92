"""The editor is asked about the whole command, not its first 80 characters, over stdio."""

from __future__ import annotations

from pathlib import Path

import pytest
from acp import text_block

from tests.runtime import scenarios as sc
from tests.support.agent_process import (
    RecordingClient,
    SharedSdkAgents,
)
from tests.support.runtime_harness import check_cards

KIND = "openai"


@pytest.mark.asyncio(loop_scope="module")
async def test_permission_request_shows_every_line_and_character(
    tmp_path: Path, shared_sdk_agents: SharedSdkAgents
) -> None:
    long_line = "echo " + "x" * 120 + " ; touch hidden-at-the-end"
    command = f"{long_line}\ntouch second-line"
    shell = ("call_sh", "run_shell_command", {"command": command})
    client = RecordingClient(permission="reject_once")
    conn, server = await shared_sdk_agents.agent(KIND, client)
    server.enqueue(sc.ok(sc.calls_turn(KIND, [shell])), sc.ok(sc.text_turn(KIND, "No.")))
    session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
    reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
    assert reply.stop_reason == "end_turn"
    [asked] = [m for m in client.raw if m.get("method") == "session/request_permission"]
    title = asked["params"]["toolCall"]["title"]
    assert title == f"Run (multi-line, 2 lines):\n{long_line}\ntouch second-line"
    assert not (tmp_path / "second-line").exists()  # rejected, so nothing ran


@pytest.mark.asyncio(loop_scope="module")
async def test_a_rejected_command_s_card_says_what_was_refused_and_why(
    tmp_path: Path, shared_sdk_agents: SharedSdkAgents
) -> None:
    """Zed shows a failed card's title first: it must say the command did not run, and which
    command, not only ``run_shell_command`` with the command somewhere in its content."""
    short = ("call_short", "run_shell_command", {"command": "touch short-one"})
    long_ = ("call_long", "run_shell_command", {"command": "echo " + "y" * 100 + "\necho two"})
    client = RecordingClient(permission="reject_once")
    conn, server = await shared_sdk_agents.agent(KIND, client)
    server.enqueue(sc.ok(sc.calls_turn(KIND, [short, long_])), sc.ok(sc.text_turn(KIND, "Fine.")))
    session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
    reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
    assert reply.stop_reason == "end_turn"
    frames = client.frames(session.session_id)
    check_cards(frames)
    ends = {f["toolCallId"]: f for f in frames if f.get("status") == "failed"}
    assert ends["call_short"]["title"] == (
        "run_shell_command: not run, permission rejected \u2014 Run touch short-one"
    )
    shortened = "Run (multi-line, 2 lines): echo " + "y" * 27 + "\u2026"
    assert ends["call_long"]["title"] == (
        f"run_shell_command: not run, permission rejected \u2014 {shortened}"
    )
    [text] = [c["content"]["text"] for c in ends["call_short"]["content"]]
    assert text == "Run touch short-one was not allowed by the user"
    assert not (tmp_path / "short-one").exists()
