"""Shell commands and stdio MCP servers run sandboxed, seen over real stdio.

The loopback provider scripts the model's calls; the agent runs in auto mode, so
nothing asks. What each command printed comes back to the provider in the next
request, which is what these tests read. Where ``bwrap`` cannot run, the agent
says so (``initialize``'s ``_meta``, a session notice) and ``--sandbox on``
refuses to start.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from acp import text_block

from tests.acp.test_mcp import echo_server
from tests.runtime import scenarios as sc
from tests.support.agent_process import RecordingClient, agent_command, running_agent
from tests.support.eventually import eventually
from tests.support.processes import none_with_argument_within, pids_with_argument
from toolprep.testing import FakeProviderServer

KIND = "anthropic"
DEADLINE_S = 20.0
SECRET = "private-key-material-5d1e0c"


def _port(server: FakeProviderServer) -> int:
    """The loopback provider's port, from its base URL."""
    return int(server.base_url.rsplit(":", 1)[1].split("/", 1)[0])


def _project(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A session directory, and a home and a data directory apart from it, outside ``/tmp``
    in the sandbox's view only through what the sandbox hides."""
    project = tmp_path / "project"
    home = tmp_path / "project" / "home"
    data = tmp_path / "project" / "data"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_x").write_text(SECRET)
    data.mkdir()
    return project, home, data


async def _run_calls(
    server: FakeProviderServer,
    calls: list[sc.Call],
    cwd: Path,
    *extra: str,
    env_update: dict[str, str] | None = None,
) -> tuple[str, RecordingClient, int]:
    """Run ``calls`` in one turn of a new session in ``cwd``; what went back to the model,
    the client, and the agent's pid."""
    server.enqueue(sc.ok(sc.calls_turn(KIND, calls)), sc.ok(sc.text_turn(KIND, "Done.")))
    command, env = agent_command(KIND, server, "--allow-shell", *extra)
    env |= env_update or {}
    client = RecordingClient()
    async with running_agent(command, env, client) as (conn, process):
        session = await conn.new_session(cwd=str(cwd), mcp_servers=[])
        reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
        pid = process.pid
    assert reply.stop_reason == "end_turn"
    return json.dumps(server.requests[1].body), client, pid


async def test_command_sees_no_credentials_data_dir_or_agent_and_writes_only_its_directory(
    tmp_path: Path,
) -> None:
    project, home, data = _project(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    marker = f"toolprep-sandbox-{uuid.uuid4().hex}"
    with FakeProviderServer() as server:
        calls: list[sc.Call] = [
            sc.shell(f"cat {home}/.ssh/id_x; echo read-done", "call_key"),
            sc.shell(f"ls -a {data}; echo listed-data", "call_data"),
            sc.shell("echo landed > inside.txt", "call_in"),
            sc.shell(f"echo escaped > {outside}/escape.txt", "call_out"),
            sc.shell(f"echo private > /tmp/{marker}", "call_tmp"),
        ]
        seen, _client, _pid = await _run_calls(
            server,
            calls,
            project,
            "--data-dir",
            str(data),
            env_update={"HOME": str(home)},
        )
        # The calls ran: their closing words came back.
        assert "read-done" in seen and "listed-data" in seen
        assert SECRET not in seen
        assert "sessions.db" not in seen  # the data directory looked empty
        assert (project / "inside.txt").read_text() == "landed\n"
        assert not (outside / "escape.txt").exists()
        assert not (Path("/tmp") / marker).exists()
    # The agent kept its sessions there all along: hidden, not missing.
    assert (data / "sessions.db").exists()


async def test_command_cannot_see_the_agent_process(tmp_path: Path) -> None:
    with FakeProviderServer() as server:
        command, env = agent_command(KIND, server, "--allow-shell")
        client = RecordingClient()
        async with running_agent(command, env, client) as (conn, process):
            seen_as = "echo agent-vis''ible || echo agent-hid''den"
            probe = f"test -e /proc/{process.pid}/cmdline && {seen_as}"
            server.enqueue(sc.ok(sc.calls_turn(KIND, [sc.shell(probe)])), sc.ok(sc.text_turn(KIND)))
            session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
        seen = json.dumps(server.requests[1].body)
        assert "agent-hidden" in seen
        assert "agent-visible" not in seen


@pytest.mark.parametrize("network", [False, True], ids=["no-network", "sandbox-network"])
async def test_network_only_with_the_option(network: bool, tmp_path: Path) -> None:
    with FakeProviderServer() as server:
        connect = (
            f'{sys.executable} -c "import socket; '
            f"socket.create_connection(('127.0.0.1', {_port(server)}), 5).close(); "
            f"print('connected-' + 'ok')\" || echo connect-fail''ed"
        )
        extra = ("--sandbox-network",) if network else ()
        seen, _client, _pid = await _run_calls(server, [sc.shell(connect)], tmp_path, *extra)
        assert ("connected-ok" in seen) is network
        assert ("connect-failed" in seen) is not network


async def test_limits_stop_a_big_file_and_a_big_allocation(tmp_path: Path) -> None:
    with FakeProviderServer() as server:
        calls: list[sc.Call] = [
            sc.shell("head -c 3000000 /dev/zero > big; echo wrote", "call_file"),
            sc.shell(
                f"{sys.executable} -c \"b = bytearray(600 * 1024 * 1024); print('alloc-' + 'ok')\""
                " || echo alloc-re''fused",
                "call_alloc",
            ),
        ]
        seen, _client, _pid = await _run_calls(
            server, calls, tmp_path, "--sandbox-limit", "file=1", "--sandbox-limit", "memory=300"
        )
        assert (tmp_path / "big").stat().st_size <= 1024 * 1024
        assert "alloc-refused" in seen and "alloc-ok" not in seen


async def test_background_children_end_with_their_command(tmp_path: Path) -> None:
    token = str(3000 + uuid.uuid4().int % 6000)
    # The pipe closes at once: unsandboxed, the child would run on until the turn ends.
    started = sc.shell(f"sleep {token} > /dev/null 2>&1 & echo started", "call_bg")
    # Holds the turn open until the test has looked.
    waits = sc.shell("while [ ! -e go ]; do sleep 0.05; done", "call_wait")
    with FakeProviderServer() as server:
        server.enqueue(
            sc.ok(sc.calls_turn(KIND, [started])),
            sc.ok(sc.calls_turn(KIND, [waits])),
            sc.ok(sc.text_turn(KIND, "Done.")),
        )
        agent, env = agent_command(KIND, server, "--allow-shell")
        client = RecordingClient()
        async with running_agent(agent, env, client) as (conn, _process):
            session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            prompt = asyncio.ensure_future(
                conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
            )
            await client.wait_for(
                lambda frames: any(
                    f.get("toolCallId") == "call_wait" and f.get("status") == "in_progress"
                    for f in frames
                )
            )
            try:
                assert none_with_argument_within(token, DEADLINE_S)
            finally:
                (tmp_path / "go").touch()
            reply = await asyncio.wait_for(prompt, DEADLINE_S)
        assert reply.stop_reason == "end_turn"


@pytest.mark.parametrize("workers", ["1", "2"])
async def test_cancel_ends_a_sandboxed_command_and_everything_it_started(
    workers: str, tmp_path: Path
) -> None:
    token = str(3000 + uuid.uuid4().int % 6000)
    # A child in a session of its own, which no process-group kill of the shell reaches.
    command = f"setsid sleep {token} & sleep {token}"
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.calls_turn(KIND, [sc.shell(command)])))
        agent, env = agent_command(KIND, server, "--allow-shell", "--workers", workers)
        client = RecordingClient()
        async with running_agent(agent, env, client) as (conn, _process):
            session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            prompt = asyncio.ensure_future(
                conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
            )
            running = await asyncio.to_thread(_two_with_argument_within, token, DEADLINE_S)
            assert running, "the command's two sleeps never ran"
            await conn.cancel(session_id=session.session_id)
            reply = await asyncio.wait_for(prompt, DEADLINE_S)
            assert reply.stop_reason == "cancelled"
            # Gone while the agent still runs: the cancel ended them, not the agent's exit.
            assert none_with_argument_within(token, DEADLINE_S)


def _two_with_argument_within(argument: str, seconds: float) -> bool:
    try:
        return eventually(lambda: len(pids_with_argument(argument)) >= 2, timeout=seconds)
    except AssertionError:
        return False


async def test_stdio_mcp_server_runs_sandboxed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    project = tmp_path / "project"
    project.mkdir()
    with FakeProviderServer() as server:
        calls: list[sc.Call] = [
            ("call_in", "mcp__echo__sneaky_write", {"path": str(project / "in.txt")}),
            ("call_out", "mcp__echo__sneaky_write", {"path": str(outside / "out.txt")}),
        ]
        server.enqueue(sc.ok(sc.calls_turn(KIND, calls)), sc.ok(sc.text_turn(KIND, "Done.")))
        command, env = agent_command(KIND, server, "--allow-shell")
        client = RecordingClient()
        async with running_agent(command, env, client) as (conn, _process):
            session = await conn.new_session(
                cwd=str(project), mcp_servers=[echo_server(uuid.uuid4().hex)]
            )
            reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
        assert reply.stop_reason == "end_turn"
    assert (project / "in.txt").read_text() == "written\n"
    assert not (outside / "out.txt").exists()


def _path_without_bwrap(tmp_path: Path) -> str:
    """A PATH with every tool the agent's commands use, but no ``bwrap``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not directory or not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            target = bin_dir / entry.name
            if entry.name != "bwrap" and not target.exists():
                target.symlink_to(entry.path)
    return str(bin_dir)


async def test_no_sandbox_is_said_in_initialize_and_the_session(tmp_path: Path) -> None:
    path = _path_without_bwrap(tmp_path)
    with FakeProviderServer() as server:
        server.enqueue(
            sc.ok(sc.calls_turn(KIND, [sc.shell("echo ran")])), sc.ok(sc.text_turn(KIND))
        )
        command, env = agent_command(KIND, server, "--allow-shell", "--log-level", "WARNING")
        env["PATH"] = path
        client = RecordingClient()
        async with running_agent(command, env, client) as (conn, _process):
            session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
    initialized = [m["result"] for m in client.raw if "agentCapabilities" in m.get("result", {})]
    assert len(initialized) == 1
    sandbox = initialized[0]["_meta"]["toolprep"]["sandbox"]
    assert sandbox["state"] == "unavailable"
    assert "bwrap" in sandbox["reason"]
    notices = [
        f["content"]["text"]
        for f in client.frames(session.session_id)
        if f["sessionUpdate"] == "agent_message_chunk"
    ]
    assert any("No sandbox" in text for text in notices)
    assert "ran" in json.dumps(server.requests[1].body)  # commands still run, unconfined


def test_sandbox_on_refuses_to_start_without_bwrap(tmp_path: Path) -> None:
    with FakeProviderServer() as server:
        command, env = agent_command(KIND, server, "--sandbox", "on")
        env["PATH"] = _path_without_bwrap(tmp_path)
        done = subprocess.run(
            command, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=60, check=False
        )
    assert done.returncode == 2
    said = done.stderr.decode().strip().splitlines()
    assert said[-1].startswith("toolprep: --sandbox on, but no sandbox can be had: ")
    assert "bwrap" in said[-1]


async def test_sandbox_is_said_in_initialize_when_on(tmp_path: Path) -> None:
    with FakeProviderServer() as server:
        command, env = agent_command(KIND, server)
        client = RecordingClient()
        async with running_agent(command, env, client):
            pass
    initialized = [m["result"] for m in client.raw if "agentCapabilities" in m.get("result", {})]
    assert initialized[0]["_meta"]["toolprep"]["sandbox"] == {"state": "on", "network": False}
