"""``session/load`` replays the whole conversation: every prompt before its answer.

The real agent runs a few prompts over stdio on a SQLite store and exits; a
new agent process loads the session. The editor that rebuilds the thread
from the replay (``ThreadRebuilder``) must show what the first editor
showed, which had its own prompts because it sent them, and the first
editor must not have been sent its prompts back.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.acp.conftest import agent_command
from tests.runtime import scenarios as sc
from tests.support.acp_schema import validate_update
from tests.support.agent_process import AgentProcess
from tests.support.fake_provider import FakeProviderServer
from tests.support.thread_rebuilder import Card, Said, ThreadRebuilder

KIND = "anthropic"

LINK = {
    "type": "resource_link",
    "uri": "file:///project/notes.txt",
    "name": "notes.txt",
    "title": "Notes",
    "size": 12,
    "annotations": {"priority": 0.5, "audience": ["user"]},
}
RESOURCE = {
    "type": "resource",
    "resource": {"uri": "file:///project/a.py", "text": "a = 1\n", "mimeType": "text/x-python"},
}
PROMPTS: list[list[dict[str, Any]]] = [
    [{"type": "text", "text": "Look at the notes"}, LINK],
    [{"type": "text", "text": "Plan it, with this file"}, RESOURCE],
    [{"type": "text", "text": "Thanks"}],
]
PLAN = [{"content": "write the replay", "status": "in_progress", "priority": "high"}]


def _agent(server: FakeProviderServer, data_dir: Path, cwd: Path, workers: int) -> AgentProcess:
    command, env = agent_command(
        KIND, server, "--allow-shell", "--data-dir", str(data_dir), "--workers", str(workers)
    )
    return AgentProcess(command, env, cwd, cwd / f"stderr-{os.urandom(4).hex()}.log")


def _enqueue_conversation(server: FakeProviderServer) -> None:
    server.enqueue(
        sc.ok(
            sc.anthropic_sse(
                thinking="The notes first.",
                text="Reading them.",
                tool_calls=[sc.shell("echo noted", "call_read")],
            )
        ),
        sc.ok(sc.text_turn(KIND, "They say hello.")),
        sc.ok(sc.anthropic_sse(tool_calls=[("call_plan", "todo_write", {"todos": PLAN})])),
        sc.ok(sc.text_turn(KIND, "Planned.")),
        sc.ok(sc.text_turn(KIND, "You are welcome.")),
    )


def _send(agent: AgentProcess, session_id: str, prompt: list[dict[str, Any]]) -> int:
    return agent.request("session/prompt", {"sessionId": session_id, "prompt": prompt})


def run_conversation(agent: AgentProcess, session_id: str) -> ThreadRebuilder:
    """Send every prompt, one turn at a time; the thread as this editor shows it."""
    shown = ThreadRebuilder()
    for prompt in PROMPTS:
        before = len(agent.updates(session_id))
        shown.sent(prompt)
        reply = agent.reply(_send(agent, session_id, prompt))
        assert reply["result"]["stopReason"] == "end_turn"
        # Every frame of the turn came before its reply.
        shown.apply_all(agent.updates(session_id)[before:])
    return shown


def check_shown(shown: ThreadRebuilder) -> None:
    """The conversation as the scenario makes it, so that comparing threads means something."""
    assert [turn.user for turn in shown.turns] == PROMPTS
    first, second, third = shown.turns
    assert first.items == [
        Said("The notes first.", thought=True),
        Said("Reading them.", thought=False),
        Card("call_read", "Run echo noted", "completed"),
        Said("They say hello.", thought=False),
    ]
    assert second.plan == PLAN
    assert second.items == [Said("Planned.", thought=False)]
    assert third.items == [Said("You are welcome.", thought=False)]


@pytest.mark.parametrize("workers", [1, 2])
def test_load_replays_each_prompt_before_its_answer(tmp_path: Path, workers: int) -> None:
    data_dir, cwd = tmp_path / "data", tmp_path / "work"
    cwd.mkdir()
    with FakeProviderServer() as server:
        _enqueue_conversation(server)
        first = _agent(server, data_dir, cwd, workers)
        try:
            session_id = first.start_session(cwd)
            shown = run_conversation(first, session_id)
            live = first.updates(session_id)
            first.close_input()
            assert first.wait_exit() == 0
        finally:
            first.kill()
        # The editor that sent the prompts was not sent them back.
        assert not [u for u in live if u["sessionUpdate"] == "user_message_chunk"]
        check_shown(shown)

        second = _agent(server, data_dir, cwd, workers)
        try:
            second.reply(
                second.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            )
            load = {"sessionId": session_id, "cwd": str(cwd), "mcpServers": []}
            assert "result" in second.reply(second.request("session/load", load))
            replayed = second.updates(session_id)  # all of it came before the load's reply
            second.close_input()
            assert second.wait_exit() == 0
        finally:
            second.kill()
    for update in replayed:
        validate_update(update, session_id)
    assert ThreadRebuilder().apply_all(replayed).turns == shown.turns
    # One message id per prompt, shared by its blocks.
    ids = [u["messageId"] for u in replayed if u["sessionUpdate"] == "user_message_chunk"]
    assert len(ids) == sum(len(prompt) for prompt in PROMPTS)
    assert len(set(ids)) == len(PROMPTS)
