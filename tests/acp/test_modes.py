"""Session modes over stdio on both wires: which tool calls ask, run or are refused in
each mode, ``session/set_mode`` and the ``mode`` config option agreeing, the mode kept
in the store across ``session/load``, and the same through worker processes."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.runtime import scenarios as sc
from tests.support.acp_schema import validate
from tests.support.agent_process import REPO, AgentProcess, agent_command
from tests.support.message_log import Message
from toolprep.testing import FakeProviderServer

KINDS = ["anthropic", "openai"]
MODES = ["ask", "accept_edits", "plan", "auto"]
WRITE = ("call_write", "write_file", {"path": "written.txt", "content": "new text\n"})
SHELL = sc.shell("touch shell-ran")
READ = ("call_read", "read_file", {"path": "existing.txt"})
PERMISSION = "session/request_permission"
PLAN_TITLE = "{}: not run, plan mode allows read-only tools"


def _start(kind: str, server: FakeProviderServer, cwd: Path, *options: str) -> AgentProcess:
    command, env = agent_command(kind, server, *options)
    return AgentProcess(command, env, cwd, cwd.parent / f"stderr-{cwd.name}.log")


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    (path / "existing.txt").write_text("old text\n")
    return path


@pytest.fixture
def server() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as provider:
        yield provider


def _new_session(agent: AgentProcess, cwd: Path) -> dict[str, Any]:
    agent.initialize()
    new: dict[str, Any] = agent.result(
        agent.request("session/new", {"cwd": str(cwd), "mcpServers": []})
    )
    validate("NewSessionResponse", new)
    return new


def _current(settings: dict[str, Any]) -> tuple[str, str]:
    """The mode as ``modes`` says and as the ``mode`` config option says."""
    [option] = [o for o in settings["configOptions"] if o["id"] == "mode"]
    assert option["category"] == "mode"
    assert [o["value"] for o in option["options"]] == MODES
    assert [m["id"] for m in settings["modes"]["availableModes"]] == MODES
    return settings["modes"]["currentModeId"], option["currentValue"]


def _set_mode(agent: AgentProcess, session_id: str, mode: str, how: str) -> None:
    if how == "set_mode":
        params = {"sessionId": session_id, "modeId": mode}
        validate("SetSessionModeRequest", params)
        validate("SetSessionModeResponse", agent.result(agent.request("session/set_mode", params)))
    else:
        params = {"sessionId": session_id, "configId": "mode", "value": mode}
        validate("SetSessionConfigOptionRequest", params)
        answer = agent.result(agent.request("session/set_config_option", params))
        validate("SetSessionConfigOptionResponse", answer)
        [option] = [o for o in answer["configOptions"] if o["id"] == "mode"]
        assert option["currentValue"] == mode


def _announced(agent: AgentProcess, session_id: str) -> list[str]:
    return [
        u["currentModeId"]
        for u in agent.updates(session_id)
        if u["sessionUpdate"] == "current_mode_update"
    ]


def _turn(agent: AgentProcess, session_id: str) -> list[str]:
    """Prompt once, allowing whatever is asked; the commands that asked, in order."""
    reply = agent.prompt(session_id)
    answered = 0

    def answered_or_asked(messages: list[Message]) -> bool:
        if any(m.get("id") == reply and "method" not in m for m in messages):
            return True
        return len([m for m in messages if m.get("method") == PERMISSION]) > answered

    while True:
        agent.wait_for(answered_or_asked)
        asked = agent.requests(PERMISSION)
        if len(asked) == answered:
            break
        for request in asked[answered:]:
            agent.answer_permission(request)
        answered = len(asked)
    assert agent.result(reply)["stopReason"] == "end_turn"
    return [r["params"]["toolCall"]["rawInput"].get("command", "?") for r in asked]


def _last_card(agent: AgentProcess, session_id: str, call_id: str) -> Message:
    [*_, last] = [u for u in agent.updates(session_id) if u.get("toolCallId") == call_id]
    return last


def _tool_results_sent_back(server: FakeProviderServer) -> str:
    return orjson.dumps(server.requests[-1].body).decode()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("mode", "how", "asked"),
    [
        ("ask", None, ["touch shell-ran"]),
        ("accept_edits", "set_mode", ["touch shell-ran"]),
        ("auto", "config_option", []),
        ("auto", "--mode", []),
    ],
)
def test_which_calls_ask_in_each_mode_that_runs_them(
    kind: str,
    mode: str,
    how: str | None,
    asked: list[str],
    server: FakeProviderServer,
    workdir: Path,
) -> None:
    server.enqueue(sc.ok(sc.calls_turn(kind, [WRITE, SHELL])), sc.ok(sc.text_turn(kind)))
    options = ("--no-persist", *(("--mode", mode) if how == "--mode" else ()))
    agent = _start(kind, server, workdir, *options)
    try:
        new = _new_session(agent, workdir)
        session_id = new["sessionId"]
        assert _current(new) == (("auto", "auto") if how == "--mode" else ("ask", "ask"))
        if how in ("set_mode", "config_option"):
            _set_mode(agent, session_id, mode, how)
            agent.wait_for(lambda _: _announced(agent, session_id) == [mode])
        assert _turn(agent, session_id) == asked
        assert (workdir / "written.txt").read_text() == "new text\n"
        assert (workdir / "shell-ran").exists()
        for call_id in ("call_write", "call_sh"):
            assert _last_card(agent, session_id, call_id)["status"] == "completed"
        agent.close_input()
        assert agent.wait_exit() == 0
    finally:
        agent.kill()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("workers", ["1", "2"])
def test_plan_mode_reads_and_refuses_writes_and_shell_with_a_clear_card(
    kind: str, workers: str, server: FakeProviderServer, workdir: Path
) -> None:
    server.enqueue(sc.ok(sc.calls_turn(kind, [READ, WRITE, SHELL])), sc.ok(sc.text_turn(kind)))
    agent = _start(kind, server, workdir, "--no-persist", "--workers", workers)
    try:
        session_id = _new_session(agent, workdir)["sessionId"]
        _set_mode(agent, session_id, "plan", "set_mode")
        assert _turn(agent, session_id) == []  # nothing asks: refused calls are not offered
        assert _last_card(agent, session_id, "call_read")["status"] == "completed"
        for call_id, tool in (("call_write", "write_file"), ("call_sh", "run_shell_command")):
            card = _last_card(agent, session_id, call_id)
            assert card["status"] == "failed"
            assert card["title"] == PLAN_TITLE.format(tool)
            [text] = [c["content"]["text"] for c in card["content"]]
            assert text.startswith(f"{tool} was not run: this session is in plan mode")
        assert not (workdir / "written.txt").exists()
        assert not (workdir / "shell-ran").exists()
        # The model is told, so it can adapt; what it read reached it.
        sent_back = _tool_results_sent_back(server)
        assert "write_file was not run: this session is in plan mode" in sent_back
        assert "run_shell_command was not run: this session is in plan mode" in sent_back
        assert "old text" in sent_back
        agent.close_input()
        assert agent.wait_exit() == 0
    finally:
        agent.kill()


@pytest.mark.parametrize("kind", KINDS)
def test_the_mode_is_kept_with_the_session_and_back_after_load(
    kind: str, server: FakeProviderServer, workdir: Path, tmp_path: Path
) -> None:
    data = str(tmp_path / "data")
    again_write = ("call_write_again", *WRITE[1:])
    server.enqueue(
        sc.ok(sc.calls_turn(kind, [WRITE])),
        sc.ok(sc.text_turn(kind)),
        sc.ok(sc.calls_turn(kind, [again_write])),
        sc.ok(sc.text_turn(kind)),
    )
    first = _start(kind, server, workdir, "--data-dir", data)
    try:
        session_id = _new_session(first, workdir)["sessionId"]
        _set_mode(first, session_id, "plan", "config_option")
        assert _turn(first, session_id) == []
        first.close_input()
        assert first.wait_exit() == 0
    finally:
        first.kill()
    # Loaded by a new agent process, whose sessions run in workers.
    again = _start(kind, server, workdir, "--data-dir", data, "--workers", "2")
    try:
        again.initialize()
        loaded = again.load(session_id, workdir)["result"]
        validate("LoadSessionResponse", loaded)
        assert _current(loaded) == ("plan", "plan")
        # The replay carries the change as it was announced, and the refused card.
        assert _announced(again, session_id) == ["plan"]
        assert _last_card(again, session_id, "call_write")["status"] == "failed"
        assert _turn(again, session_id) == []
        card = _last_card(again, session_id, "call_write_again")
        assert (card["status"], card["title"]) == ("failed", PLAN_TITLE.format("write_file"))
        assert not (workdir / "written.txt").exists()
        # Back to ask from the loaded session; the next load says so.
        _set_mode(again, session_id, "ask", "set_mode")
        again.close_input()
        assert again.wait_exit() == 0
    finally:
        again.kill()
    resumed = _start(kind, server, workdir, "--data-dir", data)
    try:
        resumed.initialize()
        params = {"sessionId": session_id, "cwd": str(workdir), "mcpServers": []}
        answer = resumed.result(resumed.request("session/resume", params))
        validate("ResumeSessionResponse", answer)
        assert _current(answer) == ("ask", "ask")
        resumed.close_input()
        assert resumed.wait_exit() == 0
    finally:
        resumed.kill()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_an_unknown_mode_is_refused_naming_the_modes_and_changes_nothing(
    workers: str, server: FakeProviderServer, workdir: Path
) -> None:
    agent = _start("openai", server, workdir, "--no-persist", "--workers", workers)
    try:
        session_id = _new_session(agent, workdir)["sessionId"]
        for method, params in (
            ("session/set_mode", {"modeId": "yolo"}),
            ("session/set_config_option", {"configId": "mode", "value": "yolo"}),
        ):
            refused = agent.reply(agent.request(method, {"sessionId": session_id, **params}))
            assert refused["error"]["code"] == -32602
            message = refused["error"]["message"]
            assert "Unknown mode 'yolo': choose one of ask, accept_edits, plan, auto" in message
        unknown = agent.reply(
            agent.request("session/set_mode", {"sessionId": "sess_unknown", "modeId": "plan"})
        )
        assert unknown["error"]["code"] == -32002
        assert _announced(agent, session_id) == []
        agent.close_input()
        assert agent.wait_exit() == 0
    finally:
        agent.kill()


def test_allow_shell_starts_sessions_in_auto_and_contradicting_modes_are_refused(
    server: FakeProviderServer, workdir: Path
) -> None:
    agent = _start("openai", server, workdir, "--no-persist", "--allow-shell")
    try:
        assert _current(_new_session(agent, workdir)) == ("auto", "auto")
        agent.close_input()
        assert agent.wait_exit() == 0
    finally:
        agent.kill()
    refused = _start("openai", server, workdir, "--no-persist", "--allow-shell", "--mode", "plan")
    try:
        assert refused.wait_exit() == 2
        assert "--allow-shell starts sessions in auto mode" in refused.stderr()
    finally:
        refused.kill()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["plan", "auto"])
def test_mcp_tools_follow_the_mode_by_their_read_only_hint(
    kind: str, mode: str, server: FakeProviderServer, workdir: Path
) -> None:
    echo = ("call_echo", "mcp__echo__echo", {"text": "hello"})  # not read-only: asks in ask
    pid: sc.Call = ("call_pid", "mcp__echo__pid", {})  # read-only, and the server is trusted
    server.enqueue(sc.ok(sc.calls_turn(kind, [echo, pid])), sc.ok(sc.text_turn(kind)))
    trusted = ("--trust-mcp-server", "echo")
    agent = _start(kind, server, workdir, "--no-persist", "--mode", mode, *trusted)
    try:
        agent.initialize()
        params = {"cwd": str(workdir), "mcpServers": [_echo_server()]}
        session_id = agent.result(agent.request("session/new", params))["sessionId"]
        assert _turn(agent, session_id) == []  # nothing asks in either mode
        assert _last_card(agent, session_id, "call_pid")["status"] == "completed"
        card = _last_card(agent, session_id, "call_echo")
        if mode == "plan":
            assert card["status"] == "failed"
            assert card["title"] == PLAN_TITLE.format("mcp__echo__echo")
            assert "echo: hello" not in _tool_results_sent_back(server)
        else:
            assert card["status"] == "completed"
            assert "echo: hello" in _tool_results_sent_back(server)
        agent.close_input()
        assert agent.wait_exit() == 0
    finally:
        agent.kill()


def _echo_server() -> dict[str, Any]:
    """The suite's MCP server as an editor's ``mcpServers`` entry names it: ``echo``."""
    return {
        "name": "echo",
        "command": sys.executable,
        "args": ["-m", "tests.support.mcp_echo_server", "--tag", f"modes-{uuid.uuid4().hex}"],
        "env": [{"name": "PYTHONPATH", "value": str(REPO)}],
    }


@pytest.mark.parametrize("trusted", [False, True], ids=["untrusted", "trusted"])
@pytest.mark.parametrize("mode", ["plan", "ask"])
def test_a_read_only_hint_counts_only_for_a_server_the_user_trusts(
    mode: str, trusted: bool, server: FakeProviderServer, workdir: Path
) -> None:
    """``sneaky_write`` says ``readOnlyHint: true`` and writes a file with a shell command.

    Untrusted, plan mode refuses it (naming the option that would let it run) and
    nothing is written; ask mode asks before it runs. Trusted, neither mode asks.
    """
    kind = "anthropic"
    target = workdir / "sneaky.txt"
    call: sc.Call = ("call_sneaky", "mcp__echo__sneaky_write", {"path": str(target)})
    server.enqueue(sc.ok(sc.calls_turn(kind, [call])), sc.ok(sc.text_turn(kind)))
    options = ["--no-persist", "--mode", mode]
    if trusted:
        options += ["--trust-mcp-server", "echo"]
    agent = _start(kind, server, workdir, *options)
    try:
        agent.initialize()
        params = {"cwd": str(workdir), "mcpServers": [_echo_server()]}
        session_id = agent.result(agent.request("session/new", params))["sessionId"]
        _turn(agent, session_id)  # allows whatever asks
        asked = [r["params"]["toolCall"]["toolCallId"] for r in agent.requests(PERMISSION)]
        card = _last_card(agent, session_id, "call_sneaky")
        if mode == "plan" and not trusted:
            assert asked == []
            assert card["status"] == "failed"
            assert card["title"] == PLAN_TITLE.format("mcp__echo__sneaky_write")
            hint = "start the agent with --trust-mcp-server echo"
            assert hint in orjson.dumps(card["content"]).decode()
            assert hint in _tool_results_sent_back(server)
            assert not target.exists()
        else:
            assert asked == ([] if trusted else ["call_sneaky"])
            assert card["status"] == "completed"
            assert target.read_text() == "written\n"
        agent.close_input()
        assert agent.wait_exit() == 0
    finally:
        agent.kill()
