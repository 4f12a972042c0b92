"""``toolprep acp --workers 2``: sessions in worker processes behind the routing front.

Driven as an editor drives the agent: the official ACP client over real
stdio, the loopback provider, real worker processes. Shell commands report
``$PPID``, the worker process that ran them, which is how a test learns
where a session lives without any test hook in the agent.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError, text_block

from tests.runtime import scenarios as sc
from tests.support.agent_process import (
    RecordingClient,
    SharedSdkAgents,
    agent_command,
    running_agent,
)
from tests.support.processes import alive, gone_within, pid_from
from tests.support.runtime_harness import (
    check_cards,
    is_discarded,
    is_preparing,
    lifecycle,
    message_text,
)
from toolprep.testing import FakeProviderServer

DEADLINE_S = 30.0
WORKERS = ("--workers", "2")
# Commands here tell which process ran them by their $PPID, or write pids the test kills:
# the machine's pids only unsandboxed (a sandboxed command's parent is its namespace's init).
UNCONFINED = ("--sandbox", "off")


def children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found.update(int(c) for c in (task / "children").read_text().split())
    return found


def worker_pid_in(frames: list[dict[str, Any]]) -> int:
    match = re.search(r"worker=(\d+)", str(frames))
    assert match, frames
    return int(match.group(1))


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_sessions_spread_over_workers_with_the_whole_lifecycle(
    kind: str, tmp_path: Path
) -> None:
    with FakeProviderServer() as server:
        client = RecordingClient()
        command, env = agent_command(kind, server, "--allow-shell", *UNCONFINED, *WORKERS)
        async with running_agent(command, env, client) as (conn, process):
            sessions = [
                (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
                for _ in range(2)
            ]
            for n, session_id in enumerate(sessions):
                call = sc.shell("echo worker=$PPID", f"call_{n}")
                server.enqueue(sc.ok(sc.calls_turn(kind, [call])), sc.ok(sc.text_turn(kind)))
                reply = await conn.prompt(session_id=session_id, prompt=[text_block("go")])
                assert reply.stop_reason == "end_turn"
            workers = children(process.pid)
            ran_on = [worker_pid_in(client.frames(s)) for s in sessions]
        assert len(workers) == 2, workers
        assert set(ran_on) == workers, (ran_on, workers)
        for n, session_id in enumerate(sessions):
            frames = client.frames(session_id)
            check_cards(frames)
            assert lifecycle(frames) == {f"call_{n}": ["preparing", "in_progress", "completed"]}
            assert message_text(frames) == "All done."


@pytest.mark.asyncio(loop_scope="module")
async def test_permission_and_cancel_cross_the_front(
    tmp_path: Path, shared_sdk_agents: SharedSdkAgents
) -> None:
    kind = "anthropic"
    client = RecordingClient(permission="allow_once")
    conn, server = await shared_sdk_agents.agent(kind, client, *WORKERS)
    asked = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
    stalled = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
    command = sc.shell("echo ran > marker.txt", "call_ask")
    server.enqueue(sc.ok(sc.calls_turn(kind, [command])), sc.ok(sc.text_turn(kind)))
    reply = await conn.prompt(session_id=asked, prompt=[text_block("go")])
    assert reply.stop_reason == "end_turn"
    assert client.permission_asked.is_set()
    assert (tmp_path / "marker.txt").read_text() == "ran\n"

    server.enqueue(sc.prepared_then_stall(kind, ("call_stall", "get_weather", {})))
    prompt = asyncio.ensure_future(conn.prompt(session_id=stalled, prompt=[text_block("go")]))
    await client.wait_for(lambda _: any(is_preparing(f) for f in client.frames(stalled)))
    await conn.cancel(session_id=stalled)
    reply = await asyncio.wait_for(prompt, DEADLINE_S)
    assert reply.stop_reason == "cancelled"
    assert lifecycle(client.frames(asked)) == {
        "call_ask": ["preparing", "in_progress", "completed"]
    }
    assert lifecycle(client.frames(stalled)) == {"call_stall": ["preparing", "discarded"]}
    check_cards(client.frames())


async def test_a_killed_worker_ends_its_turns_and_is_replaced(
    tmp_path: Path, pids: list[int]
) -> None:
    kind = "anthropic"
    victim_dir, bystander_dir = tmp_path / "victim", tmp_path / "bystander"
    victim_dir.mkdir()
    bystander_dir.mkdir()
    with FakeProviderServer() as server:
        client = RecordingClient()
        command, env = agent_command(kind, server, "--allow-shell", *UNCONFINED, *WORKERS)
        async with running_agent(command, env, client) as (conn, process):
            victim = (await conn.new_session(cwd=str(victim_dir), mcp_servers=[])).session_id
            bystander = (await conn.new_session(cwd=str(bystander_dir), mcp_servers=[])).session_id
            started_with = children(process.pid)

            long_call = sc.shell("echo $PPID > worker.pid; echo $$ > sh.pid; sleep 300", "call_v")
            server.enqueue(sc.ok(sc.calls_turn(kind, [long_call])))
            victim_turn = asyncio.ensure_future(
                conn.prompt(session_id=victim, prompt=[text_block("go")])
            )
            victim_worker = await asyncio.to_thread(pid_from, victim_dir / "worker.pid", 20)
            pids.append(await asyncio.to_thread(pid_from, victim_dir / "sh.pid", 20))

            slow_call = sc.shell("echo $PPID > worker.pid; sleep 2; echo finished", "call_b")
            server.enqueue(sc.ok(sc.calls_turn(kind, [slow_call])), sc.ok(sc.text_turn(kind)))
            bystander_turn = asyncio.ensure_future(
                conn.prompt(session_id=bystander, prompt=[text_block("go")])
            )
            bystander_worker = await asyncio.to_thread(pid_from, bystander_dir / "worker.pid", 20)
            assert bystander_worker != victim_worker

            os.kill(victim_worker, signal.SIGKILL)
            with pytest.raises(RequestError, match="killed by signal 9"):
                await asyncio.wait_for(victim_turn, DEADLINE_S)
            # The dead worker's tool processes do not outlive it.
            assert gone_within(pids[0], DEADLINE_S)

            reply = await asyncio.wait_for(bystander_turn, DEADLINE_S)
            assert reply.stop_reason == "end_turn"

            # A replacement worker takes the victim's session over.
            server.enqueue(sc.ok(sc.text_turn(kind, "Back again.")))
            again = await conn.prompt(session_id=victim, prompt=[text_block("still there?")])
            assert again.stop_reason == "end_turn"
            now = children(process.pid)
        assert not alive(victim_worker)
        assert len(now) == 2 and bystander_worker in now and victim_worker not in now, (
            started_with,
            now,
        )
        victim_frames = client.frames(victim)
        check_cards(victim_frames)
        assert lifecycle(victim_frames) == {"call_v": ["preparing", "in_progress", "discarded"]}
        # Its shell ran when the worker died: the card says it may have, not "not run".
        [end] = [f for f in victim_frames if f.get("toolCallId") == "call_v" and is_discarded(f)]
        assert end["_meta"]["discardReason"] == "interrupted"
        assert message_text(victim_frames) == "Back again."
        bystander_frames = client.frames(bystander)
        check_cards(bystander_frames)
        assert lifecycle(bystander_frames) == {"call_b": ["preparing", "in_progress", "completed"]}
        assert "finished" in str(bystander_frames)


async def test_acp_keeps_its_sessions_in_its_own_process_unless_asked(tmp_path: Path) -> None:
    """An editor starts one agent per window: without ``--workers`` there are none."""
    kind = "anthropic"
    with FakeProviderServer() as server:
        client = RecordingClient()
        command, env = agent_command(kind, server, "--allow-shell", *UNCONFINED)
        async with running_agent(command, env, client) as (conn, process):
            sessions = [
                (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
                for _ in range(2)
            ]
            idle_children = children(process.pid)
            for n, session_id in enumerate(sessions):
                call = sc.shell("echo worker=$PPID", f"call_{n}")
                server.enqueue(sc.ok(sc.calls_turn(kind, [call])), sc.ok(sc.text_turn(kind)))
                reply = await conn.prompt(session_id=session_id, prompt=[text_block("go")])
                assert reply.stop_reason == "end_turn"
            ran_on = [worker_pid_in(client.frames(s)) for s in sessions]
        assert idle_children == set()
        assert ran_on == [process.pid, process.pid]
