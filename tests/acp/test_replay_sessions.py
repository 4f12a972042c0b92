"""The keyless agent (the embedded replay provider) gives every session its own conversation.

A newcomer's first try is ``toolprep acp`` with no key, several sessions, the same
prompt: each must get the whole scripted turn (the read card and the recorded answer),
whether the sessions run at once or one after another in the one process.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.runtime import scenarios as sc
from tests.support.agent_process import AgentProcess, agent_command
from tests.support.message_log import Message
from tests.support.runtime_harness import check_cards, lifecycle, message_text
from toolprep.testing import FakeProviderServer

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


KIND = "anthropic"
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


def card_ids(updates: list[Message]) -> list[str]:
    """The id of every card the editor was shown, in the order the cards opened."""
    return [u["toolCallId"] for u in updates if u["sessionUpdate"] == "tool_call"]


def turn_in_a_new_process(
    start: Callable[[], AgentProcess], cwd: Path, prompt: str
) -> tuple[list[Message], list[Message]]:
    """A prompt in one agent; then, in the next agent on the same data directory, the
    session loaded and the same prompt again. What each showed of the session."""
    first = start()
    try:
        session_id = first.start_session(cwd)
        assert first.reply(first.prompt(session_id, prompt), 120)["result"]["stopReason"] == (
            "end_turn"
        )
        first.close_input()
        assert first.wait_exit() == 0
    finally:
        first.kill()
    second = start()
    try:
        second.reply(second.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}}))
        load = {"sessionId": session_id, "cwd": str(cwd), "mcpServers": []}
        assert "result" in second.reply(second.request("session/load", load))
        replayed = len(second.updates(session_id))
        assert second.reply(second.prompt(session_id, prompt), 120)["result"]["stopReason"] == (
            "end_turn"
        )
        second.close_input()
        assert second.wait_exit() == 0
    finally:
        second.kill()
    return first.updates(session_id), second.updates(session_id)[replayed:]


def test_a_loaded_session_never_shows_a_card_id_again(tmp_path: Path) -> None:
    """The replay numbers its ids the same in every process: the new process's card must not
    take the id of the card the session showed before, or the editor overwrites that one."""
    cwd = project(tmp_path, "loaded")
    data = tmp_path / "data"
    before, after = turn_in_a_new_process(
        lambda: keyless_agent(tmp_path, "--data-dir", str(data)), cwd, README_PROMPT
    )
    assert_whole_turn(before)
    assert_whole_turn(after)
    ids = card_ids(before) + card_ids(after)
    assert ids[0] == "toolu_replay_read_1"  # what the script gives
    assert len(ids) == 2 and len(set(ids)) == 2, ids


@pytest.mark.parametrize("workers", [1, 2])
def test_the_model_gets_the_ids_its_cards_showed_after_a_load(tmp_path: Path, workers: int) -> None:
    """A provider that gives the same id in both processes: the history the model gets has
    every call once, each answered under the id of its call, and the ids the cards showed."""
    cwd = project(tmp_path, "history")
    data = tmp_path / "data"
    read = ("toolu_same", "read_file", {"path": "README.md"})
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.calls_turn(KIND, [read])), sc.ok(sc.text_turn(KIND, "Read it.")))
        server.enqueue(sc.ok(sc.calls_turn(KIND, [read])), sc.ok(sc.text_turn(KIND, "Again.")))
        command, env = agent_command(
            KIND, server, "--data-dir", str(data), "--workers", str(workers)
        )
        before, after = turn_in_a_new_process(
            lambda: AgentProcess(command, env, cwd, tmp_path / f"stderr-{os.urandom(4).hex()}"),
            cwd,
            "read it",
        )
        last = server.requests[-1].body
    ids = card_ids(before) + card_ids(after)
    assert ids[0] == "toolu_same" and len(set(ids)) == 2, ids
    calls = [
        block["id"]
        for message in last["messages"]
        if message["role"] == "assistant"
        for block in message["content"]
        if block["type"] == "tool_use"
    ]
    results = [
        block["tool_use_id"]
        for message in last["messages"]
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] == "tool_result"
    ]
    assert calls == ids and results == ids  # each call answered under its card's id, once
