"""``toolprep acp --workers 2`` whose workers keep dying: they are restarted after a
growing wait, and meanwhile ``session/new``, and every request about a session whose
worker waits, is refused naming the wait (-32005, ``retryAfter``), not with an internal
error."""

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
from tests.support.worker_backoff import DEADLINE_S, NO_WORKER, refused_for_want_of_a_worker


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


def session_calls(session_id: str, cwd: Path) -> dict[str, dict[str, Any]]:
    """Every request about an open session that its worker serves, with its parameters."""
    session = {"sessionId": session_id}
    reopen = {**session, "cwd": str(cwd), "mcpServers": []}
    return {
        "session/prompt": {**session, "prompt": [{"type": "text", "text": "hello"}]},
        "session/set_mode": {**session, "modeId": "ask"},
        "session/set_config_option": {**session, "configId": "mode", "value": "plan"},
        "session/load": reopen,
        "session/resume": reopen,
    }


def check_backoff_codes(editor: AgentProcess, front_pid: int, cwd: Path) -> None:
    """Each request meeting a worker that waits out its back-off is answered -32005 with
    ``retryAfter``; listing still works; once the wait is over the session serves again."""
    editor.initialize()
    session_id = editor.new_session(cwd)
    for method, params in session_calls(session_id, cwd).items():
        refused_for_want_of_a_worker(editor, front_pid, method, params)
    new = {"cwd": str(cwd), "mcpServers": []}
    error = refused_for_want_of_a_worker(editor, front_pid, "session/new", new)
    assert "; worker " in error["message"], error  # every slot waits, and each is named
    listed = editor.result(editor.request("session/list", {}))
    assert session_id in [s["sessionId"] for s in listed["sessions"]]
    editor.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session_id}})

    prompt = session_calls(session_id, cwd)["session/prompt"]

    def served_again() -> dict[str, Any]:
        reply = editor.reply(editor.request("session/prompt", prompt), timeout=60)
        return {} if reply.get("error", {}).get("code") == NO_WORKER else reply

    reply = eventually(served_again, timeout=DEADLINE_S, interval=0.5)
    assert reply.get("result", {}).get("stopReason") == "end_turn", reply


def test_every_request_meeting_a_worker_in_back_off_is_told_when_to_retry(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    command = [sys.executable, "-m", "toolprep.runtime.cli", "acp", "--provider", "replay"]
    options = ["--data-dir", str(tmp_path / "data"), "--workers", "2"]
    editor = AgentProcess([*command, *options], env, REPO, tmp_path / "agent.log")
    try:
        check_backoff_codes(editor, editor.process.pid, tmp_path)
        assert editor.close(timeout=60) == 0
    finally:
        editor.kill()
