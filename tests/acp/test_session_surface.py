"""The session surface editors use besides cards, over stdio on both wires: the model
picker (``configOptions``, ``session/set_config_option``, ``config_option_update``),
``usage_update`` after each model request, and the session's title."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.runtime import scenarios as sc
from tests.support.acp_schema import validate
from tests.support.agent_process import AgentProcess, SharedAgents, agent_command
from tests.support.runtime_harness import check_cards, unnumbered
from toolprep.testing import FakeProviderServer, ScriptedResponse

KINDS = ["anthropic", "openai"]
MODELS = ("--model", "first-model", "--fallback-model", "second-model")
# What the fake provider's transcripts report: 10 tokens in, 20 out, on both wires.
TOKENS_PER_REQUEST = 30


def _start(kind: str, server: FakeProviderServer, tmp_path: Path, *options: str) -> AgentProcess:
    command, env = agent_command(kind, server, *options)
    return AgentProcess(command, env, tmp_path, tmp_path / "stderr.log")


def _result(agent: AgentProcess, request_id: int) -> Any:
    reply = agent.reply(request_id)
    assert "result" in reply, reply
    return reply["result"]


def _set_model(agent: AgentProcess, session_id: str, model: str) -> dict[str, Any]:
    params = {"sessionId": session_id, "configId": "model", "value": model}
    validate("SetSessionConfigOptionRequest", params)
    return agent.reply(agent.request("session/set_config_option", params))


def _model_option(options: list[dict[str, Any]]) -> dict[str, Any]:
    option, mode = options
    assert mode["id"] == "mode" and mode["category"] == "mode"
    assert option["id"] == "model" and option["category"] == "model"
    assert option["type"] == "select"
    return option


def _of_kind(frames: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [f for f in frames if f["sessionUpdate"] == kind]


@pytest.mark.parametrize("kind", KINDS)
def test_the_editor_picks_the_model_and_the_rest_stay_fallbacks(kind: str, tmp_path: Path) -> None:
    busy = ScriptedResponse(status=503, body={"error": {"message": "busy"}})
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.text_turn(kind)), busy, sc.ok(sc.text_turn(kind)))
        agent = _start(kind, server, tmp_path, "--no-persist", "--max-retries", "0", *MODELS)
        try:
            agent.reply(agent.request("initialize", {"protocolVersion": 1}))
            new = _result(agent, agent.request("session/new", {"cwd": str(tmp_path)}))
            validate("NewSessionResponse", new)
            option = _model_option(new["configOptions"])
            assert option["currentValue"] == "first-model"
            assert [o["value"] for o in option["options"]] == ["first-model", "second-model"]
            session_id = new["sessionId"]

            chosen = _set_model(agent, session_id, "second-model")["result"]
            validate("SetSessionConfigOptionResponse", chosen)
            assert _model_option(chosen["configOptions"])["currentValue"] == "second-model"
            agent.wait_for(lambda _: bool(_of_kind(agent.updates(), "config_option_update")))
            [update] = _of_kind(agent.updates(session_id), "config_option_update")
            assert _model_option(update["configOptions"])["currentValue"] == "second-model"

            assert _result(agent, agent.prompt(session_id))["stopReason"] == "end_turn"
            # The chosen model leads; when it fails, the turn falls back to the other one.
            assert _result(agent, agent.prompt(session_id))["stopReason"] == "end_turn"
            models = [r.body["model"] for r in server.requests]
            assert models == ["second-model", "second-model", "first-model"]
            agent.close_input()
            assert agent.wait_exit() == 0
        finally:
            agent.kill()


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"configId": "model", "value": "no-such-model"}, "choose one of first-model, second"),
        ({"configId": "effort", "value": "first-model"}, "unknown config option 'effort'"),
        ({"configId": "mode", "value": "first-model"}, "choose one of ask, accept_edits"),
        ({"configId": "model", "type": "boolean", "value": True}, "takes a value id"),
        ({"configId": "model", "value": 7}, "'value'"),
    ],
)
@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_bad_setting_is_refused_by_name_and_changes_nothing(
    params: dict[str, Any], message: str, workers: str, tmp_path: Path, shared_agents: SharedAgents
) -> None:
    options = ("--no-persist", "--workers", workers, *MODELS)
    agent, server = shared_agents.agent("openai", *options)
    server.enqueue(sc.ok(sc.text_turn("openai")))
    session_id = agent.new_session(tmp_path)
    refused = agent.reply(
        agent.request("session/set_config_option", {"sessionId": session_id, **params})
    )
    assert refused["error"]["code"] == -32602
    assert message in refused["error"]["message"]
    assert _result(agent, agent.prompt(session_id))["stopReason"] == "end_turn"
    assert [r.body["model"] for r in server.requests] == ["first-model"]
    assert _of_kind(agent.updates(session_id), "config_option_update") == []
    unknown = _set_model(agent, "sess_unknown", "first-model")
    assert unknown["error"]["code"] == -32002


@pytest.mark.parametrize(
    ("kind", "model", "options", "size"),
    [
        ("anthropic", "claude-sonnet-4-5", (), 200_000),
        ("openai", "gpt-4o", (), 128_000),
        ("openai", "qwen2.5-coder", (), 128_000),
        ("openai", "qwen2.5-coder", ("--context-window", "32768"), 32_768),
    ],
)
def test_usage_update_after_each_model_request(
    kind: str, model: str, options: tuple[str, ...], size: int, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    call = ("call_read", "read_file", {"path": "notes.txt"})
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.calls_turn(kind, [call])), sc.ok(sc.text_turn(kind)))
        agent = _start(kind, server, tmp_path, "--no-persist", "--model", model, *options)
        try:
            session_id = agent.start_session(tmp_path)
            assert _result(agent, agent.prompt(session_id))["stopReason"] == "end_turn"
            frames = agent.updates(session_id)
        finally:
            agent.kill()
    usage = [unnumbered(f) for f in _of_kind(frames, "usage_update")]
    assert (
        usage == [{"sessionUpdate": "usage_update", "used": TOKENS_PER_REQUEST, "size": size}] * 2
    )
    # The first request's usage comes before the tool it asked for runs.
    kinds = [f["sessionUpdate"] for f in frames]
    assert kinds.index("usage_update") < kinds.index("tool_call_update")
    check_cards(frames)


@pytest.mark.parametrize("kind", KINDS)
def test_the_first_prompt_titles_the_session(kind: str, tmp_path: Path) -> None:
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.text_turn(kind)), sc.ok(sc.text_turn(kind)))
        agent = _start(kind, server, tmp_path, "--no-persist")
        try:
            session_id = agent.start_session(tmp_path)
            before = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=1)
            agent.reply(agent.prompt(session_id, "Fix the   flaky\n test in parser.py"))
            agent.reply(agent.prompt(session_id, "And now the other one"))
            frames = agent.updates(session_id)
        finally:
            agent.kill()
    [info] = _of_kind(frames, "session_info_update")
    assert info["title"] == "Fix the flaky test in parser.py"
    updated = datetime.datetime.fromisoformat(info["updatedAt"].replace("Z", "+00:00"))
    assert before <= updated <= datetime.datetime.now(datetime.UTC)
    assert frames.index(info) < frames.index(_of_kind(frames, "agent_message_chunk")[0])


def test_a_long_first_prompt_gives_a_short_title(tmp_path: Path) -> None:
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.text_turn("openai")))
        agent = _start("openai", server, tmp_path, "--no-persist")
        try:
            session_id = agent.start_session(tmp_path)
            agent.reply(agent.prompt(session_id, "word " * 100))
            [info] = _of_kind(agent.updates(session_id), "session_info_update")
        finally:
            agent.kill()
    assert len(info["title"]) == 80 and info["title"].endswith("…")


@pytest.mark.parametrize("kind", KINDS)
def test_the_choice_and_the_title_outlive_the_process_and_cross_workers(
    kind: str, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    options = ("--data-dir", str(data), "--workers", "2", *MODELS)
    with FakeProviderServer() as server:
        server.enqueue(*(sc.ok(sc.text_turn(kind)) for _ in range(3)))
        agent = _start(kind, server, tmp_path, *options)
        try:
            session_id = agent.start_session(tmp_path)
            assert _set_model(agent, session_id, "second-model")["result"]
            agent.reply(agent.prompt(session_id, "Title me"))
            agent.close_input()
            assert agent.wait_exit() == 0
        finally:
            agent.kill()

        again = _start(kind, server, tmp_path, *options)
        try:
            again.reply(again.request("initialize", {"protocolVersion": 1}))
            listed = _result(again, again.request("session/list", {}))
            assert [s["title"] for s in listed["sessions"]] == ["Title me"]
            params = {"sessionId": session_id, "cwd": str(tmp_path), "mcpServers": []}
            loaded = _result(again, again.request("session/load", params))
            validate("LoadSessionResponse", loaded)
            assert _model_option(loaded["configOptions"])["currentValue"] == "second-model"
            again.reply(again.prompt(session_id, "Again"))
            # Back to the first model through the worker front, from now on.
            assert _set_model(again, session_id, "first-model")["result"]
            again.reply(again.prompt(session_id, "Once more"))
            frames = again.updates(session_id)
        finally:
            again.kill()
        models = [r.body["model"] for r in server.requests]
    assert models == ["second-model", "second-model", "first-model"]
    # The replay carries the earlier choice and title; no second title appears.
    assert len(_of_kind(frames, "session_info_update")) == 1
    choices = [
        _model_option(f["configOptions"])["currentValue"]
        for f in frames
        if f["sessionUpdate"] == "config_option_update"
    ]
    assert choices == ["second-model", "first-model"]
