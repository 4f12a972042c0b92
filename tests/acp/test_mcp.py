"""MCP servers from ``session/new``, driven over real stdio with a real MCP server.

The agent is the real ``toolprep acp`` (with and without worker processes),
the model is the loopback provider, and the server is
``tests.support.mcp_echo_server`` built with the official SDK. Each server
is started with a unique ``--tag`` so the process table tells whether it
still runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from acp import text_block
from acp.schema import EnvVariable, HttpMcpServer, McpServerStdio

from tests.runtime import scenarios as sc
from tests.support.agent_process import (
    REPO,
    AgentProcess,
    RecordingClient,
    SharedSdkAgents,
    agent_command,
    running_agent,
)
from tests.support.eventually import eventually, eventually_async
from tests.support.processes import gone_within, none_with_argument_within, pids_with_argument
from tests.support.runtime_harness import check_cards, lifecycle, tool_frames
from toolprep.testing import FakeProviderServer

KIND = "anthropic"
DEADLINE_S = 20.0
PROBE = "TOOLPREP_MCP_PROBE"
# These tests count and signal the servers' processes by their machine pids: unsandboxed
# (under bwrap each server has two more processes, and its own pids; the sandboxed server
# is tests/acp/test_sandbox.py's).
UNCONFINED = ("--sandbox", "off")


def echo_server(tag: str, name: str = "echo") -> McpServerStdio:
    """The echo server as an editor would configure it, marked with ``tag``."""
    return McpServerStdio(
        name=name,
        command=sys.executable,
        args=["-m", "tests.support.mcp_echo_server", "--tag", tag],
        env=[EnvVariable(name=PROBE, value="from-the-client"), _pythonpath()],
    )


def _pythonpath() -> EnvVariable:
    return EnvVariable(name="PYTHONPATH", value=str(REPO))


def _tag() -> str:
    return f"mcp-test-{uuid.uuid4().hex}"


def _tools_offered(body: Mapping[str, Any]) -> dict[str, Any]:
    return {tool["name"]: tool for tool in body.get("tools", [])}


def _card_text(frames: list[dict[str, Any]], call_id: str) -> str:
    terminal = [
        f
        for f in tool_frames(frames)
        if f["toolCallId"] == call_id and f.get("status") in ("completed", "failed")
    ]
    assert len(terminal) == 1, terminal
    return json.dumps(terminal[0]["content"])


def _permission_asked_for(client: RecordingClient) -> list[str]:
    return [
        m["params"]["toolCall"]["toolCallId"]
        for m in client.raw
        if m.get("method") == "session/request_permission"
    ]


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("workers", ["1", "2"])
async def test_mcp_tools_run_as_session_tools(
    workers: str, tmp_path: Path, shared_sdk_agents: SharedSdkAgents
) -> None:
    tag = _tag()
    calls = [
        ("call_echo", "mcp__echo__echo", {"text": "hello"}),
        ("call_key", "mcp__echo__env_has", {"name": "ANTHROPIC_API_KEY"}),
        ("call_probe", "mcp__echo__env_has", {"name": PROBE}),
    ]
    client = RecordingClient()
    conn, server = await shared_sdk_agents.agent(
        KIND,
        client,
        *UNCONFINED,
        "--no-persist",
        "--workers",
        workers,
        "--trust-mcp-server",
        "echo",
    )
    server.enqueue(sc.ok(sc.calls_turn(KIND, calls)), sc.ok(sc.text_turn(KIND, "Echoed.")))
    session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[echo_server(tag)])
    assert len(pids_with_argument(tag)) == 1  # started with the session
    reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
    assert reply.stop_reason == "end_turn"
    await conn.close_session(session_id=session.session_id)
    # Gone while the agent still runs: closing the session stopped it.
    assert none_with_argument_within(tag, DEADLINE_S)

    frames = client.frames()
    check_cards(frames)
    assert lifecycle(frames) == {
        call_id: ["preparing", "in_progress", "completed"] for call_id, _, _ in calls
    }
    for frame in tool_frames(frames):
        assert frame["_meta"]["provenance"] == "mcp", frame
        assert frame["_meta"]["serverId"] == "echo", frame
    assert "echo: hello" in _card_text(frames, "call_echo")
    # The provider's key never reached the server; the client's env entry did.
    assert "ANTHROPIC_API_KEY is not set" in _card_text(frames, "call_key")
    assert f"{PROBE} is set" in _card_text(frames, "call_probe")
    # Only the tool the (trusted) server does not call read-only asked first; the
    # option crossed to the worker processes too.
    assert _permission_asked_for(client) == ["call_echo"]

    offered = _tools_offered(server.requests[0].body)
    assert offered["mcp__echo__echo"]["input_schema"]["properties"]["text"]["type"] == ("string")
    assert "read_file" in offered  # the built-ins stay
    assert "echo: hello" in json.dumps(server.requests[1].body)


@pytest.mark.parametrize("workers", ["1", "2"])
async def test_a_secret_a_server_finds_on_its_own_is_masked_in_its_result(
    workers: str, tmp_path: Path
) -> None:
    """A server kept from the key by its environment reads it from its parent's
    ``/proc/<pid>/environ``; the value is not there, and neither the card nor the model
    sees it."""
    key = f"sk-ant-{uuid.uuid4().hex}"
    calls: list[tuple[str, str, dict[str, Any]]] = [("call_leak", "mcp__echo__parent_environ", {})]
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.calls_turn(KIND, calls)), sc.ok(sc.text_turn(KIND, "Read.")))
        command, env = agent_command(
            KIND, server, *UNCONFINED, "--no-persist", "--workers", workers
        )
        env["ANTHROPIC_API_KEY"] = key
        client = RecordingClient()
        async with running_agent(command, env, client) as (conn, _):
            session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[echo_server(_tag())])
            reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
            assert reply.stop_reason == "end_turn"

        frames = client.frames()
        card = _card_text(frames, "call_leak")
        # The server did read its parent's environment block: the key was withdrawn from it
        # at start (the front's holds ANTHROPIC_API_KEY= and no value; a worker's none).
        assert "HOME=" in card, card
        assert key not in card
        assert key not in json.dumps(server.requests[1].body)


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("workers", ["1", "2"])
async def test_crash_and_timeout_fail_their_cards_and_the_session_goes_on(
    workers: str, tmp_path: Path, shared_sdk_agents: SharedSdkAgents
) -> None:
    tag = _tag()
    first = [("call_slow", "mcp__echo__sleep", {"seconds": 30})]
    second = [("call_crash", "mcp__echo__crash", {"code": 3})]
    third = [("call_after", "mcp__echo__echo", {"text": "anyone?"})]
    client = RecordingClient()
    conn, server = await shared_sdk_agents.agent(
        KIND, client, *UNCONFINED, "--no-persist", "--workers", workers, "--mcp-call-timeout", "2"
    )
    server.enqueue(
        sc.ok(sc.calls_turn(KIND, first)),
        sc.ok(sc.calls_turn(KIND, second)),
        sc.ok(sc.calls_turn(KIND, third)),
        sc.ok(sc.text_turn(KIND, "The server is gone.")),
        sc.ok(sc.text_turn(KIND, "Still here.")),
    )
    session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[echo_server(tag)])
    reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
    assert reply.stop_reason == "end_turn"
    again = await conn.prompt(session_id=session.session_id, prompt=[text_block("more")])
    assert again.stop_reason == "end_turn"
    assert none_with_argument_within(tag, DEADLINE_S)

    frames = client.frames()
    check_cards(frames)
    assert lifecycle(frames) == {
        "call_slow": ["preparing", "in_progress", "failed"],
        "call_crash": ["preparing", "in_progress", "failed"],
        "call_after": ["preparing", "in_progress", "failed"],
    }
    for frame in tool_frames(frames):
        assert frame["_meta"]["provenance"] == "mcp", frame
        assert frame["_meta"]["serverId"] == "echo", frame
    assert "MCP server 'echo' did not answer within 2 s" in _card_text(frames, "call_slow")
    crashed = "MCP server 'echo' exited (code 3) during the call"
    assert crashed in _card_text(frames, "call_crash")
    assert "MCP server 'echo' is not running" in _card_text(frames, "call_after")
    assert crashed in json.dumps(server.requests[2].body)  # the model was told too
    assert len(server.requests) == 5


def _parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


async def test_a_killed_worker_takes_its_servers_and_the_replacement_starts_them_again(
    tmp_path: Path, pids: list[int]
) -> None:
    tag = _tag()
    calls = [("call_probe", "mcp__echo__env_has", {"name": PROBE})]
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.calls_turn(KIND, calls)), sc.ok(sc.text_turn(KIND, "Back.")))
        command, env = agent_command(KIND, server, *UNCONFINED, "--no-persist", "--workers", "2")
        client = RecordingClient()
        async with running_agent(command, env, client) as (conn, agent):
            session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[echo_server(tag)])
            [first] = pids_with_argument(tag)
            pids.append(first)
            worker = _parent_of(first)
            assert worker != agent.pid  # the server runs beside the session, in its worker
            os.kill(worker, signal.SIGKILL)
            assert gone_within(first, DEADLINE_S)
            # The replacement worker reopened the session with the same servers.
            restarted = await eventually_async(
                lambda: pids_with_argument(tag),
                timeout=DEADLINE_S,
                interval=0.1,
                what="the server was not started again",
            )
            pids.extend(restarted)
            assert _parent_of(restarted[0]) not in (worker, agent.pid)
            reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
            assert reply.stop_reason == "end_turn"
        assert none_with_argument_within(tag, DEADLINE_S)
    frames = client.frames()
    assert lifecycle(frames) == {"call_probe": ["preparing", "in_progress", "completed"]}
    assert f"{PROBE} is set" in _card_text(frames, "call_probe")


def test_server_that_cannot_start_is_left_out_with_a_warning(tmp_path: Path) -> None:
    tag = _tag()
    broken = {"name": "broken", "command": str(tmp_path / "no-such-server"), "args": [], "env": []}
    good = echo_server(tag).model_dump(by_alias=True, exclude_none=True)
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.text_turn(KIND, "Hi.")))
        command, env = agent_command(KIND, server, *UNCONFINED, "--no-persist", "--workers", "1")
        agent = AgentProcess(command, env, REPO, tmp_path / "stderr.log")
        try:
            init = agent.reply(agent.request("initialize", {"protocolVersion": 1}))
            capabilities = init["result"]["agentCapabilities"]["mcpCapabilities"]
            assert capabilities == {"http": True, "sse": True}
            opened = agent.reply(
                agent.request("session/new", {"cwd": str(tmp_path), "mcpServers": [broken, good]})
            )
            session_id = opened["result"]["sessionId"]
            assert agent.reply(agent.prompt(session_id))["result"]["stopReason"] == "end_turn"
            agent.close_input()
            assert agent.wait_exit() == 0
        finally:
            agent.kill()
        offered = _tools_offered(server.requests[0].body)
        assert "mcp__echo__echo" in offered
        assert not [name for name in offered if name.startswith("mcp__broken__")]
        log = agent.stderr()
        assert "MCP server 'broken' left out of session" in log
        assert "no-such-server" in log
        # The agent's exit (stdin closed) stopped the server that did start.
        assert none_with_argument_within(tag, DEADLINE_S)


def test_a_slow_server_holds_up_only_its_own_session_new(tmp_path: Path) -> None:
    """While one session's server starts, the connection serves other sessions' requests.

    The slow server starts only once the test opens its gate, after the quick session's
    whole turn: no sleep that a busy machine could outlast."""
    gate = tmp_path / "gate"
    wait = f'while [ ! -e "{gate}" ]; do sleep 0.05; done'
    slow = {
        "name": "slow",
        "command": "/bin/sh",
        "args": ["-c", f'{wait}; exec "{sys.executable}" -m tests.support.mcp_echo_server'],
        "env": [{"name": "PYTHONPATH", "value": str(REPO)}],
    }
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.text_turn(KIND, "Quick.")), sc.ok(sc.text_turn(KIND, "Slow.")))
        command, env = agent_command(KIND, server, *UNCONFINED, "--no-persist", "--workers", "1")
        agent = AgentProcess(command, env, REPO, tmp_path / "stderr.log")
        try:
            agent.reply(agent.request("initialize", {"protocolVersion": 1}))
            opening = agent.request("session/new", {"cwd": str(tmp_path), "mcpServers": [slow]})
            new = {"cwd": str(tmp_path), "mcpServers": []}
            quick = agent.reply(agent.request("session/new", new))["result"]["sessionId"]
            agent.reply(agent.prompt(quick))
            # The quick session's whole turn was answered while the slow server started.
            assert not [m for m in agent.messages if m.get("id") == opening]
            gate.touch()
            session_id = agent.reply(opening)["result"]["sessionId"]
            assert agent.reply(agent.prompt(session_id))["result"]["stopReason"] == "end_turn"
            agent.close_input()
            assert agent.wait_exit() == 0
        finally:
            agent.kill()
    assert "mcp__slow__echo" in _tools_offered(server.requests[1].body)
    assert "mcp__slow__echo" not in _tools_offered(server.requests[0].body)


def test_malformed_server_entry_is_a_named_invalid_params_error(tmp_path: Path) -> None:
    entry = {"name": "half", "args": [], "env": []}  # no command
    with FakeProviderServer() as server:
        command, env = agent_command(KIND, server, *UNCONFINED, "--no-persist", "--workers", "1")
        agent = AgentProcess(command, env, REPO, tmp_path / "stderr.log")
        try:
            agent.reply(agent.request("initialize", {"protocolVersion": 1}))
            answer = agent.reply(
                agent.request("session/new", {"cwd": str(tmp_path), "mcpServers": [entry]})
            )
            agent.close_input()
            agent.wait_exit()
        finally:
            agent.kill()
    assert answer["error"]["code"] == -32602
    assert "mcpServers[0].command" in answer["error"]["message"]


def test_loaded_session_gets_the_servers_of_the_load_request(tmp_path: Path) -> None:
    """Servers are not stored: ``session/load`` starts the ones it names, in the worker."""
    tag = _tag()
    data = tmp_path / "data"
    project = tmp_path / "project"
    project.mkdir()
    calls = [("call_probe", "mcp__echo__env_has", {"name": PROBE})]
    with FakeProviderServer() as server:
        server.enqueue(
            sc.ok(sc.text_turn(KIND, "First life.")),
            sc.ok(sc.calls_turn(KIND, calls)),
            sc.ok(sc.text_turn(KIND, "Second life.")),
        )
        # Trusted, so the read-only probe runs without asking (no one here answers).
        trusted = ("--trust-mcp-server", "echo")
        command, env = agent_command(
            KIND, server, *UNCONFINED, "--data-dir", str(data), "--workers", "2", *trusted
        )
        agent = AgentProcess(command, env, REPO, tmp_path / "stderr.log")
        try:
            session_id = agent.start_session(project)
            assert agent.reply(agent.prompt(session_id))["result"]["stopReason"] == "end_turn"
            assert "result" in agent.reply(
                agent.request("session/close", {"sessionId": session_id})
            )
            load = {
                "sessionId": session_id,
                "cwd": str(project),
                "mcpServers": [echo_server(tag).model_dump(by_alias=True, exclude_none=True)],
            }
            assert "result" in agent.reply(agent.request("session/load", load))
            assert len(pids_with_argument(tag)) == 1
            assert agent.reply(agent.prompt(session_id))["result"]["stopReason"] == "end_turn"
            agent.close_input()
            assert agent.wait_exit() == 0
        finally:
            agent.kill()
        assert "mcp__echo__env_has" not in _tools_offered(server.requests[0].body)
        assert "mcp__echo__env_has" in _tools_offered(server.requests[1].body)
        frames = agent.updates(session_id)
        assert lifecycle(frames)["call_probe"] == ["preparing", "in_progress", "completed"]
        assert f"{PROBE} is set" in _card_text(frames, "call_probe")
        assert none_with_argument_within(tag, DEADLINE_S)


def _listens(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S):
            return True
    except OSError:
        return False


@pytest.fixture
def http_echo_server(tmp_path: Path) -> Iterator[str]:
    """The echo server on Streamable HTTP, on a free loopback port: its URL."""
    port_file = tmp_path / "port"
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.mcp_echo_server", "--http", str(port_file)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def port_written() -> str:
            text = port_file.read_text() if port_file.is_file() else ""
            return text if text.endswith("\n") else ""

        port = int(
            eventually(port_written, timeout=DEADLINE_S, what="the HTTP server wrote no port")
        )
        eventually(
            lambda: _listens(port),
            timeout=DEADLINE_S,
            interval=0.1,
            what="the HTTP server never listened",
        )
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


@pytest.mark.asyncio(loop_scope="module")
async def test_http_server_tools_run_too(
    http_echo_server: str, tmp_path: Path, shared_sdk_agents: SharedSdkAgents
) -> None:
    calls = [("call_web", "mcp__web__echo", {"text": "over http"})]
    client = RecordingClient()
    conn, server = await shared_sdk_agents.agent(
        KIND, client, *UNCONFINED, "--no-persist", "--workers", "1"
    )
    server.enqueue(sc.ok(sc.calls_turn(KIND, calls)), sc.ok(sc.text_turn(KIND, "Done.")))
    web = HttpMcpServer(type="http", name="web", url=http_echo_server, headers=[])
    session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[web])
    reply = await asyncio.wait_for(
        conn.prompt(session_id=session.session_id, prompt=[text_block("go")]), DEADLINE_S
    )
    assert reply.stop_reason == "end_turn"
    frames = client.frames()
    check_cards(frames)
    assert lifecycle(frames) == {"call_web": ["preparing", "in_progress", "completed"]}
    assert all(f["_meta"]["serverId"] == "web" for f in tool_frames(frames))
    assert "echo: over http" in _card_text(frames, "call_web")
