"""``toolprep acp --workers 2`` whose workers keep dying: they are restarted after a
growing wait, and meanwhile ``session/new`` is refused naming the wait, not with an
internal error."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson
import pytest

from tests.acp.conftest import REPO
from tests.support.acp_schema import validate_agent_message
from tests.support.processes import worker_pids_of

NO_WORKER = -32005
DEADLINE_S = 240.0
"""Generous: the waits grow to the 30 s cap while the test keeps killing."""


class Agent:
    """``toolprep acp`` on pipes; its log goes to a file, which a crash loop fills."""

    def __init__(self, log: IO[bytes], *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "toolprep.runtime.cli", "acp", *args],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
        )
        self._ids = iter(range(1, 1_000_000))

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send a request and return its reply, skipping notifications."""
        assert self.process.stdin is not None and self.process.stdout is not None
        request_id = next(self._ids)
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        self.process.stdin.write(orjson.dumps(message) + b"\n")
        self.process.stdin.flush()
        while True:
            line = self.process.stdout.readline()
            assert line, "the agent closed stdout"
            reply: dict[str, Any] = orjson.loads(line)
            validate_agent_message(reply)
            if reply.get("id") == request_id and "method" not in reply:
                return reply

    def close(self) -> int:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        try:
            return self.process.wait(timeout=60)
        finally:
            self.process.stdout.close()


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    with (tmp_path / "agent.log").open("wb") as log:
        running = Agent(log, "--provider", "replay", "--no-persist", "--workers", "2")
        try:
            reply = running.call("initialize", {"protocolVersion": 1})
            assert reply["result"]["protocolVersion"] == 1
            yield running
        finally:
            if running.process.poll() is None:
                running.process.kill()
            running.process.wait()
            for pipe in (running.process.stdin, running.process.stdout):
                if pipe is not None and not pipe.closed:
                    pipe.close()


def test_workers_that_keep_dying_are_restarted_after_a_wait_that_new_sessions_are_told(
    agent: Agent, tmp_path: Path
) -> None:
    new_session = {"cwd": str(tmp_path), "mcpServers": []}
    deadline = time.monotonic() + DEADLINE_S
    while True:  # kill every worker, again and again, until both slots wait out a back-off
        assert time.monotonic() < deadline, "session/new was never refused for want of a worker"
        for pid in worker_pids_of(agent.process.pid):
            os.kill(pid, signal.SIGKILL)
        reply = agent.call("session/new", new_session)
        error = reply.get("error", {})
        if error.get("code") == NO_WORKER and "next restart in" in error["message"]:
            break
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
    while "error" in (reply := agent.call("session/new", new_session)):
        assert reply["error"]["code"] == NO_WORKER, reply
        assert time.monotonic() < deadline, reply
        time.sleep(0.2)
    assert reply["result"]["sessionId"]
    assert agent.close() == 0
