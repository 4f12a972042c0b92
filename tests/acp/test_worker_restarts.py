"""``toolprep acp --workers 2`` whose workers keep dying: they are restarted after a
growing wait, and meanwhile ``session/new`` is refused naming the wait, not with an
internal error."""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent_process import REPO, AgentProcess
from tests.support.eventually import eventually
from tests.support.processes import worker_pids_of

NO_WORKER = -32005
DEADLINE_S = 240.0
"""Generous: the waits grow to the 30 s cap while the test keeps killing."""


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentProcess]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    command = [sys.executable, "-m", "toolprep.runtime.cli", "acp"]
    options = ["--provider", "replay", "--no-persist", "--workers", "2"]
    running = AgentProcess([*command, *options], env, REPO, tmp_path / "agent.log")
    try:
        reply = running.reply(running.request("initialize", {"protocolVersion": 1}))
        assert reply["result"]["protocolVersion"] == 1
        yield running
    finally:
        running.kill()


def _call(agent: AgentProcess, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return agent.reply(agent.request(method, params))


def test_workers_that_keep_dying_are_restarted_after_a_wait_that_new_sessions_are_told(
    agent: AgentProcess, tmp_path: Path
) -> None:
    new_session = {"cwd": str(tmp_path), "mcpServers": []}

    def refused_for_want_of_a_worker() -> dict[str, Any]:
        for pid in worker_pids_of(agent.process.pid):
            os.kill(pid, signal.SIGKILL)
        reply = _call(agent, "session/new", new_session)
        error: dict[str, Any] = reply.get("error", {})
        refused = error.get("code") == NO_WORKER and "next restart in" in error["message"]
        return error if refused else {}

    # Kill every worker, again and again, until both slots wait out a back-off.
    error = eventually(
        refused_for_want_of_a_worker,
        timeout=DEADLINE_S,
        interval=0,
        what="session/new was never refused for want of a worker",
    )
    message = error["message"]
    assert message.startswith("no worker available: worker 0 "), message
    how = r"(was killed by signal 9|did not start \(killed by signal 9\))"
    state = r"\((once|\d+ times) in \d+ s\); (next restart in \d+ s|restarting now)"
    # A slot whose worker was just killed may not have had that death counted yet.
    slot = rf"worker [01] ({how} {state}|is starting)"
    said = re.split(r"; (?=worker \d)", message.removeprefix("no worker available: "))
    assert len(said) == 2, message
    for part in said:
        assert re.fullmatch(slot, part), message
    assert isinstance(error["data"]["retryAfter"], int), error

    # The slots are not given up: once the wait is over, sessions open again.

    def opened_or_refused_otherwise() -> dict[str, Any]:
        reply = _call(agent, "session/new", new_session)
        waiting = "error" in reply and reply["error"]["code"] == NO_WORKER
        return {} if waiting else reply

    reply = eventually(opened_or_refused_otherwise, timeout=DEADLINE_S, interval=0.2)
    assert "error" not in reply, reply  # refused for nothing but the wait
    assert reply["result"]["sessionId"]
    assert agent.close(timeout=60) == 0
