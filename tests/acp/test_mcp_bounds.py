"""A hostile MCP server is bounded: what it lists is capped, its session alone pays, and
what it starts ends with the session even if it left the server's process group.

The real ``toolprep acp`` with the loopback provider, and real MCP server
processes: one listing 20,000 tools (every session in one process, the
worst case for a neighbour), one that starts detached ``sleep`` processes.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.runtime import scenarios as sc
from tests.support.agent_process import REPO, AgentProcess, agent_command
from tests.support.eventually import eventually
from tests.support.processes import alive, gone_within
from tests.support.runtime_harness import message_text
from toolprep.testing import FakeProviderServer

KIND = "anthropic"
BULK = 20_000
OPEN_TIMEOUT_S = 120.0


def _bulk_server(tools: int) -> dict[str, Any]:
    return {
        "name": "many",
        "command": sys.executable,
        "args": ["-m", "tests.support.mcp_echo_server", "--bulk-tools", str(tools)],
        "env": [{"name": "PYTHONPATH", "value": str(REPO)}],
    }


def _mcp_tools(body: dict[str, Any]) -> list[str]:
    return [t["name"] for t in body.get("tools", []) if t["name"].startswith("mcp__many__")]


@pytest.mark.parametrize(("options", "offered"), [((), 512), (("--max-mcp-tools", "40"), 40)])
def test_a_server_listing_twenty_thousand_tools_is_cut_and_its_neighbour_goes_on(
    options: tuple[str, ...], offered: int, tmp_path: Path
) -> None:
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.text_turn(KIND, "Crowded.")), sc.ok(sc.text_turn(KIND, "Calm.")))
        command, env = agent_command(KIND, server, "--no-persist", "--workers", "1", *options)
        agent = AgentProcess(command, env, REPO, tmp_path / "stderr.log")
        try:
            agent.reply(agent.request("initialize", {"protocolVersion": 1}))
            new = {"cwd": str(tmp_path), "mcpServers": [_bulk_server(BULK)]}
            opened = agent.reply(agent.request("session/new", new), OPEN_TIMEOUT_S)
            crowded = opened["result"]["sessionId"]
            calm = agent.start_session(tmp_path)
            first = agent.reply(agent.prompt(crowded), OPEN_TIMEOUT_S)
            assert first["result"]["stopReason"] == "end_turn"
            second = agent.reply(agent.prompt(calm), OPEN_TIMEOUT_S)
            assert second["result"]["stopReason"] == "end_turn"
            # The note is said once: the next turn of the crowded session has none.
            server.enqueue(sc.ok(sc.text_turn(KIND, "Again.")))
            again = agent.reply(agent.prompt(crowded), OPEN_TIMEOUT_S)
            assert again["result"]["stopReason"] == "end_turn"
            agent.close_input()
            assert agent.wait_exit() == 0
        finally:
            agent.kill()
        crowded_tools = _mcp_tools(server.requests[0].body)
        # The first ones the server listed (its own, then bulk_0...), and no more.
        assert len(crowded_tools) == offered
        own = [name for name in crowded_tools if not name.startswith("mcp__many__bulk_")]
        assert "mcp__many__echo" in own
        assert f"mcp__many__bulk_{offered - len(own) - 1}" in crowded_tools
        assert f"mcp__many__bulk_{offered - len(own)}" not in crowded_tools
        assert _mcp_tools(server.requests[1].body) == []
        assert len(_mcp_tools(server.requests[2].body)) == offered

    note = f"MCP server 'many' lists more than {offered} tools; only the first {offered}"
    assert note in agent.stderr()
    assert agent.stderr().count(note) == 1
    crowded_text = message_text(agent.updates(crowded))
    assert crowded_text.count(note) == 1
    assert crowded_text.endswith("Crowded.Again.")
    assert message_text(agent.updates(calm)) == "Calm."


def _pids_in(path: Path, seconds: float) -> list[int]:
    eventually(path.exists, timeout=seconds, interval=0.05, what=f"{path.name} was never written")
    return [int(line) for line in path.read_text().split()]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_processes_a_server_detached_from_its_group_end_with_the_session(
    workers: str, tmp_path: Path
) -> None:
    pid_file = tmp_path / "detached.pids"
    detaching = {
        "name": "detaching",
        "command": sys.executable,
        "args": ["-m", "tests.support.mcp_echo_server", "--detach", str(pid_file)],
        "env": [{"name": "PYTHONPATH", "value": str(REPO)}],
    }
    with FakeProviderServer() as server:
        # The server writes its children's pids for the test to check: the machine's pids
        # only unsandboxed (a sandboxed server's PID namespace ends with it as a whole).
        command, env = agent_command(
            KIND, server, "--sandbox", "off", "--no-persist", "--workers", workers
        )
        agent = AgentProcess(command, env, REPO, tmp_path / "stderr.log")
        try:
            agent.reply(agent.request("initialize", {"protocolVersion": 1}))
            new = {"cwd": str(tmp_path), "mcpServers": [detaching]}
            session_id = agent.reply(agent.request("session/new", new), OPEN_TIMEOUT_S)["result"][
                "sessionId"
            ]
            detached = _pids_in(pid_file, OPEN_TIMEOUT_S)
            assert len(detached) == 2
            assert all(alive(pid) for pid in detached)
            closed = agent.request("session/close", {"sessionId": session_id})
            assert "result" in agent.reply(closed)
            # Gone while the agent still runs: the session's close ended them.
            for pid in detached:
                assert gone_within(pid, OPEN_TIMEOUT_S), f"process {pid} outlived the session"
            agent.close_input()
            assert agent.wait_exit() == 0
        finally:
            agent.kill()
