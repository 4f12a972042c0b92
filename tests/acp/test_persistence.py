"""``toolprep acp --data-dir``: sessions outlive the agent process.

Each test runs the real agent over stdio, stops or kills it, starts a new one
on the same data directory and checks what the editor gets from
``session/list``, ``session/load`` and ``session/delete``, with and without
worker processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.runtime import scenarios as sc
from tests.support.acp_schema import validate_agent_message
from tests.support.agent_process import AgentProcess, agent_command
from tests.support.processes import pid_from
from tests.support.runtime_harness import check_cards, is_discarded, lifecycle, message_text
from toolprep.runtime.store import SessionStore
from toolprep.testing import FakeProviderServer

KIND = "anthropic"
SESSION_NOT_FOUND = -32002


def _agent(server: FakeProviderServer, data_dir: Path, cwd: Path, workers: int) -> AgentProcess:
    command, env = agent_command(
        KIND,
        server,
        "--allow-shell",
        "--data-dir",
        str(data_dir),
        "--workers",
        str(workers),
        # A test kills the pid a command wrote: the machine's pid only unsandboxed.
        "--sandbox",
        "off",
    )
    return AgentProcess(command, env, cwd, cwd / f"stderr-{os.urandom(4).hex()}.log")


def _initialize(agent: AgentProcess) -> dict[str, Any]:
    reply = agent.reply(
        agent.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    )
    capabilities: dict[str, Any] = reply["result"]["agentCapabilities"]
    return capabilities


@pytest.mark.parametrize("workers", [1, 2])
def test_a_session_is_listed_loaded_and_continued_by_the_next_agent(
    tmp_path: Path, workers: int
) -> None:
    data_dir, cwd = tmp_path / "data", tmp_path / "work"
    cwd.mkdir()
    with FakeProviderServer() as server:
        server.enqueue(
            sc.ok(sc.calls_turn(KIND, [sc.shell("echo remembered", "call_1")])),
            sc.ok(sc.text_turn(KIND, "Noted.")),
        )
        first = _agent(server, data_dir, cwd, workers)
        try:
            session_id = first.start_session(cwd)
            reply = first.reply(first.prompt(session_id, "the first question"))
            assert reply["result"]["stopReason"] == "end_turn"
            sent = first.updates(session_id)
            first.close_input()
            assert first.wait_exit() == 0
        finally:
            first.kill()

        server.enqueue(sc.ok(sc.text_turn(KIND, "You asked about it.")))
        second = _agent(server, data_dir, cwd, workers)
        try:
            capabilities = _initialize(second)
            assert capabilities["loadSession"] is True
            assert capabilities["sessionCapabilities"] == {
                "close": {},
                "list": {},
                "delete": {},
                "resume": {},
            }
            listed = second.reply(second.request("session/list", {}))["result"]
            assert [s["sessionId"] for s in listed["sessions"]] == [session_id]
            assert listed["sessions"][0]["title"] == "the first question"
            assert listed["sessions"][0]["cwd"] == str(cwd.resolve())
            assert listed["nextCursor"] is None

            load = {"sessionId": session_id, "cwd": str(cwd), "mcpServers": []}
            assert second.reply(second.request("session/load", load))["result"].keys() == {
                "modes",
                "configOptions",
            }
            # The replay is the prompt, which the first client showed itself, then what was sent.
            [asked, *shown] = second.updates(session_id)
            assert asked == {
                "sessionUpdate": "user_message_chunk",
                "messageId": asked["messageId"],
                "content": {"type": "text", "text": "the first question"},
                "_meta": {"toolprep": {"seq": 1}},  # the first frame in the session's log
            }
            assert shown == sent

            again = second.reply(second.prompt(session_id, "what did I ask?"))
            assert again["result"]["stopReason"] == "end_turn"
            second.close_input()
            assert second.wait_exit() == 0
        finally:
            second.kill()
        sent_back = str(server.requests[-1].body)
        assert "the first question" in sent_back and "remembered" in sent_back
        for message in second.messages:
            validate_agent_message(message)
        check_cards(second.updates(session_id))


def test_cards_of_a_killed_agent_replay_as_discarded(tmp_path: Path, pids: list[int]) -> None:
    data_dir, cwd = tmp_path / "data", tmp_path / "work"
    cwd.mkdir()
    quick = sc.shell("echo quick", "call_quick")
    stuck = sc.shell("echo $$ > sh.pid; sleep 300", "call_stuck")
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.calls_turn(KIND, [quick, stuck])))
        first = _agent(server, data_dir, cwd, workers=1)
        try:
            session_id = first.start_session(cwd)
            first.prompt(session_id, "two calls")
            pids.append(pid_from(cwd / "sh.pid", 30))
            # The quick call finished (its card is stored terminal); the stuck one runs.
            os.kill(first.process.pid, signal.SIGKILL)
            first.wait_exit()
        finally:
            first.kill()

        second = _agent(server, data_dir, cwd, workers=1)
        try:
            _initialize(second)
            load = {"sessionId": session_id, "cwd": str(cwd), "mcpServers": []}
            assert "result" in second.reply(second.request("session/load", load))
            replayed = second.updates(session_id)
            second.close_input()
            second.wait_exit()
        finally:
            second.kill()
    cards = lifecycle(replayed)
    assert cards["call_quick"] == ["preparing", "in_progress", "completed"]
    assert cards["call_stuck"][0] == "preparing" and cards["call_stuck"][-1] == "discarded"
    # The shell call's start was stored before it ran: its card says it may have run.
    [stuck_end] = [f for f in replayed if f.get("toolCallId") == "call_stuck" and is_discarded(f)]
    assert stuck_end["_meta"]["discardReason"] == "interrupted"
    assert "it may have run" in stuck_end["title"]
    check_cards(replayed)


def test_a_deleted_session_is_gone_for_good(tmp_path: Path) -> None:
    data_dir, cwd = tmp_path / "data", tmp_path / "work"
    cwd.mkdir()
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.text_turn(KIND, "Hello.")))
        agent = _agent(server, data_dir, cwd, workers=1)
        try:
            session_id = agent.start_session(cwd)
            agent.reply(agent.prompt(session_id, "hi"))
            deleted = agent.reply(agent.request("session/delete", {"sessionId": session_id}))
            assert deleted["result"] == {}
            listed = agent.reply(agent.request("session/list", {}))["result"]
            assert listed["sessions"] == []
            load = {"sessionId": session_id, "cwd": str(cwd), "mcpServers": []}
            error = agent.reply(agent.request("session/load", load))["error"]
            assert error["code"] == SESSION_NOT_FOUND
            assert session_id in error["message"]
            bad = agent.reply(agent.request("session/list", {"cursor": "not-a-cursor"}))["error"]
            assert "not a session list cursor" in bad["message"]
            agent.close_input()
            assert agent.wait_exit() == 0
        finally:
            agent.kill()


def test_no_persist_offers_nothing_and_writes_nothing(tmp_path: Path) -> None:
    data_home = tmp_path / "xdg"
    with FakeProviderServer() as server:
        command, env = agent_command(KIND, server, "--workers", "1", "--no-persist")
        env["XDG_DATA_HOME"] = str(data_home)
        agent = AgentProcess(command, env, tmp_path, tmp_path / "stderr.log")
        try:
            capabilities = _initialize(agent)
            assert capabilities["loadSession"] is False
            assert capabilities["sessionCapabilities"] == {"close": {}}
            error = agent.reply(agent.request("session/list", {}))["error"]
            assert error["code"] == -32601  # method not found
            agent.close_input()
            assert agent.wait_exit() == 0
        finally:
            agent.kill()
    assert not data_home.exists()


def test_sessions_are_kept_in_the_user_data_directory_by_default(tmp_path: Path) -> None:
    data_home, cwd = tmp_path / "xdg", tmp_path / "work"
    cwd.mkdir()
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.text_turn(KIND, "Kept by default.")))
        command, env = agent_command(KIND, server, "--workers", "1")
        env["XDG_DATA_HOME"] = str(data_home)
        agent = AgentProcess(command, env, cwd, tmp_path / "stderr.log")
        try:
            capabilities = _initialize(agent)
            assert capabilities["loadSession"] is True
            session_id = agent.start_session(cwd)
            assert agent.reply(agent.prompt(session_id, "keep"))["result"]["stopReason"]
            agent.close_input()
            assert agent.wait_exit() == 0
        finally:
            agent.kill()
    with SessionStore(data_home / "toolprep" / "sessions.db") as store:
        assert message_text(list(store.sessions.load(session_id).frames)) == "Kept by default."


def test_close_then_resume_goes_on_without_a_replay(tmp_path: Path) -> None:
    data_dir, cwd = tmp_path / "data", tmp_path / "work"
    cwd.mkdir()
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.text_turn(KIND, "First.")), sc.ok(sc.text_turn(KIND, "Second.")))
        agent = _agent(server, data_dir, cwd, workers=1)
        try:
            session_id = agent.start_session(cwd)
            agent.reply(agent.prompt(session_id, "remember xyzzy"))
            shown = len(agent.updates(session_id))
            closed = agent.reply(agent.request("session/close", {"sessionId": session_id}))
            assert closed["result"] == {}
            refused = agent.reply(agent.prompt(session_id, "after close"))["error"]
            assert refused["code"] == SESSION_NOT_FOUND
            again = agent.reply(agent.request("session/close", {"sessionId": session_id}))
            assert again["error"]["code"] == SESSION_NOT_FOUND

            resume = {"sessionId": session_id, "cwd": str(cwd), "mcpServers": []}
            assert agent.reply(agent.request("session/resume", resume))["result"].keys() == {
                "modes",
                "configOptions",
            }
            assert len(agent.updates(session_id)) == shown  # nothing replayed
            reply = agent.reply(agent.prompt(session_id, "two"))
            assert reply["result"]["stopReason"] == "end_turn"
            agent.close_input()
            assert agent.wait_exit() == 0
        finally:
            agent.kill()
    assert "remember xyzzy" in str(server.requests[-1].body)  # the resume restored history


@pytest.mark.parametrize("workers", [1, 2])
def test_a_data_dir_holding_no_database_stops_start_up_by_name(
    tmp_path: Path, workers: int
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "sessions.db").write_bytes(b"not a database, just text " * 200)
    with FakeProviderServer() as server:
        command, env = agent_command(
            KIND, server, "--data-dir", str(data_dir), "--workers", str(workers)
        )
        done = subprocess.run(command, env=env, input=b"", capture_output=True, timeout=60)
    assert done.returncode == 2
    assert b"toolprep: cannot open the session database" in done.stderr
    assert str(data_dir / "sessions.db").encode() in done.stderr
    assert done.stdout == b""  # nothing on the protocol stream
    assert (data_dir / "sessions.db").read_bytes().startswith(b"not a database")
