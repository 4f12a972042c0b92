"""The keyless agent (the embedded replay provider) gives every session its own conversation.

A newcomer's first try is ``toolprep acp`` with no key, several sessions, the same
prompt: each must get the whole scripted turn (the read card and the recorded answer),
whether the sessions run at once or one after another in the one process.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.support.agent_process import AgentProcess
from tests.support.message_log import Message
from tests.support.runtime_harness import check_cards, lifecycle, message_text

README_PROMPT = "Read README.md and tell me what this project is."
RECORDED_ANSWER = "This is a tiny demo project for toolprep."


def keyless_agent(tmp_path: Path, *options: str) -> AgentProcess:
    """``toolprep acp`` as a newcomer starts it: no API key in the environment."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    command = [sys.executable, "-m", "toolprep.runtime.cli", "acp", *options]
    return AgentProcess(command, env, tmp_path, tmp_path / f"stderr-{os.urandom(4).hex()}.log")


def project(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "README.md").write_text("# A project\n\nSomething to read.\n")
    return folder


def new_session(agent: AgentProcess, cwd: Path) -> str:
    answer = agent.reply(agent.request("session/new", {"cwd": str(cwd), "mcpServers": []}))
    session_id: str = answer["result"]["sessionId"]
    return session_id


def assert_whole_turn(updates: list[Message]) -> None:
    """The scripted README turn: one read card, preparing to completed, then the answer."""
    check_cards(updates)
    assert list(lifecycle(updates).values()) == [["preparing", "in_progress", "completed"]]
    text = message_text(updates)
    assert RECORDED_ANSWER in text, text
    assert "no recorded answer" not in text


def test_sessions_with_the_same_prompt_each_get_the_whole_turn(tmp_path: Path) -> None:
    agent = keyless_agent(tmp_path, "--no-persist")
    try:
        agent.reply(agent.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}}))
        # Three sessions at once, then two more one after another, all in this one process.
        together = [new_session(agent, project(tmp_path, f"at-once-{n}")) for n in range(3)]
        prompts = [agent.prompt(session_id, README_PROMPT) for session_id in together]
        for request_id in prompts:
            assert agent.reply(request_id, timeout=120)["result"]["stopReason"] == "end_turn"
        in_turn = []
        for n in range(2):
            session_id = new_session(agent, project(tmp_path, f"in-turn-{n}"))
            reply = agent.reply(agent.prompt(session_id, README_PROMPT), timeout=120)
            assert reply["result"]["stopReason"] == "end_turn"
            in_turn.append(session_id)
        for session_id in together + in_turn:
            assert_whole_turn(agent.updates(session_id))
        agent.close_input()
        assert agent.wait_exit() == 0
    finally:
        agent.kill()


NOTES_PROMPT = "Write a short NOTES.md for this project."


def test_a_write_plan_mode_refused_is_not_reported_done(tmp_path: Path) -> None:
    cwd = project(tmp_path, "planned")
    agent = keyless_agent(tmp_path, "--no-persist")
    try:
        agent.reply(agent.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}}))
        refused = new_session(agent, cwd)
        mode = {"sessionId": refused, "modeId": "plan"}
        assert "result" in agent.reply(agent.request("session/set_mode", mode))
        reply = agent.reply(agent.prompt(refused, NOTES_PROMPT), timeout=120)
        assert reply["result"]["stopReason"] == "end_turn"
        written = new_session(agent, cwd)  # the same prompt in ask mode: the write is done
        reply = agent.reply(agent.prompt(written, NOTES_PROMPT), timeout=120)
        assert reply["result"]["stopReason"] == "end_turn"
        agent.close_input()
        assert agent.wait_exit() == 0
    finally:
        agent.kill()
    updates = agent.updates(refused)
    check_cards(updates)
    [failed] = [u for u in updates if u.get("status") == "failed" and u.get("content")]
    assert failed["title"] == "write_file: not run, plan mode allows read-only tools"
    text = message_text(updates)
    assert "Done" not in text and "NOTES.md now holds" not in text, text
    assert "NOTES.md was not written" in text
    assert "Done: NOTES.md now holds a short summary" in message_text(agent.updates(written))
    assert (cwd / "NOTES.md").exists()  # written by the second session, not the first
