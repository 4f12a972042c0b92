"""SIGTERM / SIGINT / SIGHUP end the agent the way stdin EOF does, over real stdio.

Whatever the agent is doing (streaming a tool call, running a command,
idle), a stop signal must leave the client with every prompt answered and
every card terminal, stop tool processes, and exit 0 without a traceback; a
second signal while shutdown is still busy forces the process out. SIGQUIT
and SIGUSR1 only dump the threads' stacks to stderr: the agent goes on.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.runtime import scenarios as sc
from tests.support.agent_process import AgentProcess, agent_command
from tests.support.eventually import eventually
from tests.support.processes import gone_within, pid_from
from tests.support.runtime_harness import check_cards, is_preparing, lifecycle
from toolprep.testing import FakeProviderServer

KIND = "anthropic"
STOP_SIGNALS = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP]
DUMP_SIGNALS = [signal.SIGQUIT, signal.SIGUSR1]
DEADLINE_S = 30.0  # far above what a clean stop takes; only a hang comes near it
WORKERS = ["1", "2"]  # tools in this process, or in worker processes behind the front


def _assert_clean_stderr(agent: AgentProcess) -> None:
    log = agent.stderr()
    assert "Traceback" not in log
    assert "Fatal Python error" not in log


@pytest.fixture
def server() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as fake:
        yield fake


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[list[AgentProcess]]:
    started: list[AgentProcess] = []
    yield started
    for agent in started:
        agent.kill()


def _start(
    server: FakeProviderServer, tmp_path: Path, agents: list[AgentProcess], *extra: str
) -> AgentProcess:
    agent = AgentProcess(
        *agent_command(KIND, server, "--allow-shell", "--sandbox", "off", *extra),
        tmp_path,
        tmp_path / "stderr.log",
    )
    agents.append(agent)
    return agent


def _frames_with_turn_end(agent: AgentProcess, prompt_id: int) -> list[dict[str, Any]]:
    """The session updates, with the reply's place marked as ``check_cards`` expects."""
    out: list[dict[str, Any]] = []
    for message in agent.messages:
        if message.get("method") == "session/update":
            out.append(message["params"]["update"])
        elif message.get("id") == prompt_id and "method" not in message:
            out.append({"sessionUpdate": "__turn_result__"})
    return out


@pytest.mark.parametrize("signum", STOP_SIGNALS, ids=lambda s: s.name)
def test_signal_mid_stream_discards_the_card_and_answers_the_prompt(
    signum: signal.Signals,
    server: FakeProviderServer,
    tmp_path: Path,
    agents: list[AgentProcess],
) -> None:
    server.enqueue(sc.prepared_then_stall(KIND, ("call_read", "read_file", {"path": "x"})))
    agent = _start(server, tmp_path, agents)
    session_id = agent.start_session(tmp_path)
    prompt_id = agent.prompt(session_id)
    agent.wait_for(lambda _: any(is_preparing(u) for u in agent.updates()))
    agent.process.send_signal(signum)
    assert agent.reply(prompt_id)["result"]["stopReason"] == "cancelled"
    assert agent.wait_exit(DEADLINE_S) == 0
    frames = _frames_with_turn_end(agent, prompt_id)
    check_cards(frames)
    assert lifecycle(frames) == {"call_read": ["preparing", "discarded"]}
    _assert_clean_stderr(agent)


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("signum", STOP_SIGNALS, ids=lambda s: s.name)
def test_signal_mid_tool_fails_the_card_and_stops_the_command(
    signum: signal.Signals,
    workers: str,
    server: FakeProviderServer,
    tmp_path: Path,
    agents: list[AgentProcess],
    pids: list[int],
) -> None:
    command = "echo $$ > sh.pid; sleep 300 & echo $! > bg.pid; sleep 30"
    server.enqueue(
        sc.ok(sc.calls_turn(KIND, [("call_sh", "run_shell_command", {"command": command})]))
    )
    agent = _start(server, tmp_path, agents, "--workers", workers)
    session_id = agent.start_session(tmp_path)
    prompt_id = agent.prompt(session_id)
    pids.extend(pid_from(tmp_path / name, DEADLINE_S) for name in ("sh.pid", "bg.pid"))
    agent.process.send_signal(signum)
    assert agent.reply(prompt_id)["result"]["stopReason"] == "cancelled"
    assert agent.wait_exit(DEADLINE_S) == 0
    frames = _frames_with_turn_end(agent, prompt_id)
    check_cards(frames)
    assert lifecycle(frames) == {"call_sh": ["preparing", "in_progress", "failed"]}
    assert all(gone_within(pid, DEADLINE_S) for pid in pids)
    _assert_clean_stderr(agent)


@pytest.mark.parametrize("signum", STOP_SIGNALS, ids=lambda s: s.name)
def test_signal_when_idle_exits_cleanly(
    signum: signal.Signals,
    server: FakeProviderServer,
    tmp_path: Path,
    agents: list[AgentProcess],
) -> None:
    agent = _start(server, tmp_path, agents)
    agent.start_session(tmp_path)
    agent.process.send_signal(signum)
    assert agent.wait_exit(DEADLINE_S) == 0
    _assert_clean_stderr(agent)


@pytest.mark.parametrize("workers", WORKERS)
def test_second_signal_forces_exit_while_shutdown_waits(
    workers: str,
    server: FakeProviderServer,
    tmp_path: Path,
    agents: list[AgentProcess],
    pids: list[int],
) -> None:
    """A command that ignores SIGTERM holds shutdown for the kill grace; a second signal
    during that wait leaves at once, with SIGKILL for the tool processes."""
    command = "trap '' TERM; sleep 300 & echo $! > bg.pid; wait"
    server.enqueue(
        sc.ok(sc.calls_turn(KIND, [("call_sh", "run_shell_command", {"command": command})]))
    )
    agent = _start(server, tmp_path, agents, "--workers", workers)
    session_id = agent.start_session(tmp_path)
    prompt_id = agent.prompt(session_id)
    pids.append(pid_from(tmp_path / "bg.pid", DEADLINE_S))
    agent.process.send_signal(signal.SIGTERM)
    # The reply is written before shutdown starts waiting for the command to die.
    assert agent.reply(prompt_id)["result"]["stopReason"] == "cancelled"
    agent.process.send_signal(signal.SIGTERM)
    assert agent.wait_exit(DEADLINE_S) == 128 + signal.SIGTERM
    assert gone_within(pids[0], DEADLINE_S)
    _assert_clean_stderr(agent)
    assert "second stop signal" in agent.stderr()


def _has_stack_dump(log: str) -> bool:
    """faulthandler's format: a ``Thread 0x...`` header, then ``File "...", line N`` lines."""
    return (
        re.search(r"^(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):$", log, re.M)
        is not None
        and re.search(r'^  File ".+", line \d+ in \w+$', log, re.M) is not None
    )


@pytest.mark.parametrize("signum", DUMP_SIGNALS, ids=lambda s: s.name)
def test_dump_signal_prints_the_stacks_and_the_agent_goes_on(
    signum: signal.Signals,
    server: FakeProviderServer,
    tmp_path: Path,
    agents: list[AgentProcess],
) -> None:
    server.enqueue(sc.ok(sc.text_turn(KIND, "still here")))
    agent = _start(server, tmp_path, agents)
    session_id = agent.start_session(tmp_path)
    agent.process.send_signal(signum)

    def dumped() -> bool:
        assert agent.process.poll() is None, agent.stderr()
        return _has_stack_dump(agent.stderr())

    eventually(dumped, timeout=DEADLINE_S, interval=0.05)
    assert _has_stack_dump(agent.stderr()), agent.stderr()
    # The same process answers a prompt afterwards, and still stops cleanly.
    assert agent.reply(agent.prompt(session_id))["result"]["stopReason"] == "end_turn"
    agent.close_input()
    assert agent.wait_exit(DEADLINE_S) == 0
    _assert_clean_stderr(agent)
