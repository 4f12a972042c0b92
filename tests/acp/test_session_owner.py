"""One owner per stored session, across every process on one data directory.

Two real ``toolprep acp`` agents share a ``--data-dir``. While the first
serves a session, the second can neither delete it nor load or resume it:
each is refused with an error naming the first agent's pid, and the first
goes on serving the session. Once the first agent has exited, the second
may delete it. With worker processes the sessions are owned in the name of
the agent the editor started, so the error names that pid and the agent may
still delete the sessions its own workers serve.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.runtime import scenarios as sc
from tests.support.agent_process import AgentProcess, agent_command
from toolprep.testing import FakeProviderServer

KIND = "anthropic"
SESSION_IN_USE = -32003
SESSION_NOT_FOUND = -32002


def _agent(server: FakeProviderServer, data_dir: Path, cwd: Path, workers: str) -> AgentProcess:
    command, env = agent_command(KIND, server, "--data-dir", str(data_dir), "--workers", workers)
    return AgentProcess(command, env, cwd, cwd / f"stderr-{os.urandom(4).hex()}.log")


def _initialize(agent: AgentProcess) -> None:
    agent.reply(agent.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}}))


def _refused(agent: AgentProcess, method: str, params: dict[str, Any], owner_pid: int) -> None:
    error = agent.reply(agent.request(method, params))["error"]
    assert error["code"] == SESSION_IN_USE, error
    holder = f"pid {owner_pid} on {socket.gethostname()}"
    assert error["message"] == (
        f"session {params['sessionId']} is served by another live toolprep process "
        f"({holder}); close it there or stop that process first"
    )
    assert error["data"] == {"sessionId": params["sessionId"], "holder": holder}


def _turn_ends(agent: AgentProcess, session_id: str) -> None:
    assert agent.reply(agent.prompt(session_id))["result"]["stopReason"] == "end_turn"


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_session_another_live_agent_serves_is_refused_until_that_agent_exits(
    workers: str, tmp_path: Path
) -> None:
    data_dir, cwd = tmp_path / "data", tmp_path / "work"
    cwd.mkdir()
    with FakeProviderServer() as server:
        server.enqueue(*(sc.ok(sc.text_turn(KIND, f"Turn {n}.")) for n in range(2)))
        first = _agent(server, data_dir, cwd, workers)
        second = _agent(server, data_dir, cwd, workers)
        try:
            session_id = first.start_session(cwd)
            _turn_ends(first, session_id)
            _initialize(second)
            by_id = {"sessionId": session_id}
            reopen = {**by_id, "cwd": str(cwd), "mcpServers": []}
            _refused(second, "session/delete", by_id, first.process.pid)
            _refused(second, "session/load", reopen, first.process.pid)
            _refused(second, "session/resume", reopen, first.process.pid)
            _turn_ends(first, session_id)  # the first agent serves it as before
            first.close_input()
            assert first.wait_exit() == 0
            # Its owner is gone: the session may be deleted now, and then it is gone.
            assert second.reply(second.request("session/delete", by_id))["result"] == {}
            error = second.reply(second.request("session/load", reopen))["error"]
            assert error["code"] == SESSION_NOT_FOUND
            second.close_input()
            assert second.wait_exit() == 0
        finally:
            first.kill()
            second.kill()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_an_agent_deletes_the_sessions_it_serves_itself(workers: str, tmp_path: Path) -> None:
    data_dir, cwd = tmp_path / "data", tmp_path / "work"
    cwd.mkdir()
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.text_turn(KIND, "Hello.")))
        agent = _agent(server, data_dir, cwd, workers)
        try:
            open_one = agent.start_session(cwd)
            _turn_ends(agent, open_one)
            closed_one = agent.reply(
                agent.request("session/new", {"cwd": str(cwd), "mcpServers": []})
            )["result"]["sessionId"]
            closed = agent.reply(agent.request("session/close", {"sessionId": closed_one}))
            assert closed["result"] == {}
            for session_id in (open_one, closed_one):
                deleted = agent.reply(agent.request("session/delete", {"sessionId": session_id}))
                assert deleted["result"] == {}, deleted
            assert agent.reply(agent.request("session/list", {}))["result"]["sessions"] == []
            agent.close_input()
            assert agent.wait_exit() == 0
        finally:
            agent.kill()
