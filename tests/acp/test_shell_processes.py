"""Background children of shell commands do not outlive their turn or the agent.

Each command starts a background ``sleep`` and writes its pid to a file;
after the turn ends (normally, cancelled, timed out) or the agent exits,
that process must be gone. Driven over real stdio with the loopback provider.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from acp import text_block

from tests.runtime import scenarios as sc
from tests.support.agent_process import (
    AgentProcess,
    RecordingClient,
    SharedSdkAgents,
    agent_command,
    running_agent,
)
from tests.support.processes import gone_within, pid_from
from tests.support.runtime_harness import check_cards, lifecycle
from toolprep.testing import FakeProviderServer

KIND = "anthropic"
DEADLINE_S = 20.0
# The commands write their pids for the test to check: the machine's pids only unsandboxed
# (a sandboxed command has its own PID namespace, and its children end with it:
# tests/acp/test_sandbox.py).
UNCONFINED = ("--sandbox", "off")


@pytest.mark.parametrize(
    "command",
    [
        "sleep 300 & echo $! > bg.pid",  # the child holds the output pipe
        "sleep 300 > /dev/null 2>&1 & echo $! > bg.pid",  # the pipe closes at once
    ],
    ids=["holding-pipe", "detached"],
)
async def test_background_child_dies_when_the_turn_ends(
    command: str, tmp_path: Path, pids: list[int]
) -> None:
    with FakeProviderServer() as server:
        server.enqueue(
            sc.ok(sc.calls_turn(KIND, [sc.shell(command)])),
            sc.ok(sc.calls_turn(KIND, [sc.shell("kill -0 $(cat bg.pid) && echo alive", "call_2")])),
            sc.ok(sc.text_turn(KIND, "Started it.")),
        )
        client = RecordingClient()
        command_line, env = agent_command(KIND, server, "--allow-shell", *UNCONFINED)
        async with running_agent(command_line, env, client) as (conn, _):
            session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
            pids.append(pid_from(tmp_path / "bg.pid", DEADLINE_S))
            assert reply.stop_reason == "end_turn"
            # Gone while the agent still runs: the turn's end stopped it, not the exit.
            assert gone_within(pids[0], DEADLINE_S)
        # Within the turn the child kept running, so a later call could use it.
        assert "alive" in str(server.requests[2].body)
        check_cards(client.frames())


@pytest.mark.asyncio(loop_scope="module")
async def test_cancel_kills_the_running_command_and_its_children(
    tmp_path: Path, shared_sdk_agents: SharedSdkAgents, pids: list[int]
) -> None:
    command = "echo $$ > sh.pid; sleep 300 & echo $! > bg.pid; sleep 300"
    client = RecordingClient()
    conn, server = await shared_sdk_agents.agent(KIND, client, "--allow-shell", *UNCONFINED)
    server.enqueue(sc.ok(sc.calls_turn(KIND, [sc.shell(command)])))
    session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
    prompt = asyncio.ensure_future(
        conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
    )
    pids.extend(
        await asyncio.to_thread(
            lambda: [pid_from(tmp_path / n, DEADLINE_S) for n in ("sh.pid", "bg.pid")]
        )
    )
    await conn.cancel(session_id=session.session_id)
    reply = await asyncio.wait_for(prompt, DEADLINE_S)
    assert reply.stop_reason == "cancelled"
    assert all(gone_within(pid, DEADLINE_S) for pid in pids)
    assert lifecycle(client.frames()) == {"call_sh": ["preparing", "in_progress", "failed"]}
    check_cards(client.frames())


@pytest.mark.asyncio(loop_scope="module")
async def test_timeout_kills_the_command_and_its_children(
    tmp_path: Path, shared_sdk_agents: SharedSdkAgents, pids: list[int]
) -> None:
    command = "sleep 300 & echo $! > bg.pid; sleep 300"
    client = RecordingClient()
    conn, server = await shared_sdk_agents.agent(KIND, client, "--allow-shell", *UNCONFINED)
    server.enqueue(
        sc.ok(sc.calls_turn(KIND, [sc.shell(command, timeout_s=1)])),
        sc.ok(sc.text_turn(KIND, "It timed out.")),
    )
    session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
    reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
    pids.append(pid_from(tmp_path / "bg.pid", DEADLINE_S))
    assert reply.stop_reason == "end_turn"
    assert gone_within(pids[0], DEADLINE_S)
    failed = next(f for f in client.frames() if f.get("status") == "failed")
    assert "timed out after 1 s" in str(failed["content"])


@pytest.mark.parametrize("workers", ["1", "2"])
def test_agent_exit_kills_children_of_finished_and_running_commands(
    workers: str, tmp_path: Path, pids: list[int]
) -> None:
    """Stdin EOF mid-turn: the earlier call's background child and the running call die."""
    first = sc.shell("sleep 300 > /dev/null 2>&1 & echo $! > first.pid", "call_first")
    second = sc.shell("echo $$ > second.pid; sleep 300", "call_second")
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.calls_turn(KIND, [first, second])))
        agent = AgentProcess(
            *agent_command(KIND, server, "--allow-shell", *UNCONFINED, "--workers", workers),
            tmp_path,
            tmp_path / "stderr.log",
        )
        try:
            session_id = agent.start_session(tmp_path)
            prompt_id = agent.prompt(session_id)
            pids.extend(pid_from(tmp_path / n, DEADLINE_S) for n in ("first.pid", "second.pid"))
            agent.close_input()
            assert agent.reply(prompt_id)["result"]["stopReason"] == "cancelled"
            assert agent.wait_exit() == 0
        finally:
            agent.kill()
        assert all(gone_within(pid, DEADLINE_S) for pid in pids)
        assert "Traceback" not in agent.stderr()
