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

import pytest

from tests.support.acp_schema import validate_update
from tests.support.agent_process import AgentProcess, agent_command
from tests.support.conversation import KIND, PROMPTS, check_shown, enqueue_answers, run_prompt
from tests.support.thread_rebuilder import ThreadRebuilder
from toolprep.testing import FakeProviderServer


def _agent(server: FakeProviderServer, data_dir: Path, cwd: Path, workers: int) -> AgentProcess:
    command, env = agent_command(
        KIND, server, "--allow-shell", "--data-dir", str(data_dir), "--workers", str(workers)
    )
    return AgentProcess(command, env, cwd, cwd / f"stderr-{os.urandom(4).hex()}.log")


@pytest.mark.parametrize("workers", [1, 2])
def test_load_replays_each_prompt_before_its_answer(tmp_path: Path, workers: int) -> None:
    data_dir, cwd = tmp_path / "data", tmp_path / "work"
    cwd.mkdir()
    with FakeProviderServer() as server:
        enqueue_answers(server)
        first = _agent(server, data_dir, cwd, workers)
        try:
            session_id = first.start_session(cwd)
            shown = ThreadRebuilder()
            for prompt in PROMPTS:
                run_prompt(first, session_id, prompt, shown)
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
