"""How abandoned calls read in a client, one retry budget per model, and token-limit cuts,
over stdio on both wires."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.runtime import scenarios as sc
from tests.support.agent_process import AgentProcess, agent_command
from tests.support.runtime_harness import check_cards, lifecycle
from toolprep.testing import FakeProviderServer, ScriptedResponse

KINDS = ["anthropic", "openai"]
CALL = ("call_cut", "read_file", {"path": "a-rather-long-file-name-to-cut.txt"})


def _run_turn(
    kind: str, server: FakeProviderServer, tmp_path: Path, *options: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    command, env = agent_command(kind, server, "--no-persist", "--workers", "1", *options)
    # agent_command sets --max-retries 2; options given later win.
    agent = AgentProcess(command, env, tmp_path, tmp_path / "stderr.log")
    try:
        session_id = agent.start_session(tmp_path)
        reply = agent.reply(agent.prompt(session_id))
        agent.close_input()
        assert agent.wait_exit() == 0
        return reply, agent.updates(session_id)
    finally:
        agent.kill()


def _discard(frames: list[dict[str, Any]]) -> dict[str, Any]:
    [frame] = [f for f in frames if (f.get("_meta") or {}).get("preparationDiscarded")]
    return frame


def _cut_by_the_token_limit(kind: str) -> ScriptedResponse:
    """The call's identity and a little of its arguments, then the token limit's end."""
    opened = sc.until_opened(kind, CALL, extra_fragments=1)
    if kind == "anthropic":
        tail = sc.events(sc.calls_turn(kind, [CALL]))[-3:]  # block stop, message_delta, stop
        tail = [e.replace(b'"stop_reason":"tool_use"', b'"stop_reason":"max_tokens"') for e in tail]
    else:
        full = sc.events(sc.calls_turn(kind, [CALL]))
        finish = next(i for i, e in enumerate(full) if b'"finish_reason":"tool_calls"' in e)
        tail = [
            e.replace(b'"finish_reason":"tool_calls"', b'"finish_reason":"length"')
            for e in full[finish:]
        ]
    return ScriptedResponse(events=[*opened, *tail])


@pytest.mark.parametrize("kind", KINDS)
def test_a_call_cut_by_the_token_limit_stops_the_turn_alike_on_both_wires(
    kind: str, tmp_path: Path
) -> None:
    with FakeProviderServer() as server:
        server.enqueue(_cut_by_the_token_limit(kind))
        reply, frames = _run_turn(kind, server, tmp_path)
        assert len(server.requests) == 1  # never retried: it would be cut at the same place
    assert reply["result"]["stopReason"] == "max_tokens"
    assert lifecycle(frames) == {"call_cut": ["preparing", "discarded"]}
    discard = _discard(frames)
    assert discard["title"] == "read_file: not run, the reply hit the token limit"
    assert discard["_meta"]["discardReason"] == "max_tokens"
    assert "rawInput" not in discard and "locations" not in discard
    check_cards(frames)


@pytest.mark.parametrize("kind", KINDS)
def test_one_retry_budget_per_model_then_the_fallback(kind: str, tmp_path: Path) -> None:
    busy = ScriptedResponse(status=503, body={"error": {"message": "busy"}})
    with FakeProviderServer() as server:
        server.enqueue(busy, busy, busy, sc.ok(sc.text_turn(kind, "From the fallback.")))
        reply, _frames = _run_turn(
            kind,
            server,
            tmp_path,
            "--model",
            "first-model",
            "--fallback-model",
            "second-model",
            "--max-retries",
            "2",
            "--max-retry-wait",
            "0.01",
        )
        models = [r.body["model"] for r in server.requests]
    assert reply["result"]["stopReason"] == "end_turn"
    # One try and exactly two retries of the first model, then the fallback: no hidden retries.
    assert models == ["first-model"] * 3 + ["second-model"]


@pytest.mark.parametrize(
    ("scenario", "options", "reason", "title"),
    [
        ("error_then_ok", ("--max-retry-wait", "0.01"), "retry", "the model retried"),
        (
            "error_then_fallback",
            ("--max-retries", "0", "--fallback-model", "backup-model"),
            "model_fallback",
            "fell back to backup-model",
        ),
        ("error", ("--max-retries", "0"), "stream_error", "stream failed"),
    ],
)
def test_a_discarded_card_says_why_in_its_title(
    scenario: str, options: tuple[str, ...], reason: str, title: str, tmp_path: Path
) -> None:
    kind = "anthropic"
    with FakeProviderServer() as server:
        server.enqueue(sc.prepared_then_error(kind, CALL))
        if scenario != "error":
            server.enqueue(sc.ok(sc.text_turn(kind, "Recovered.")))
        reply, frames = _run_turn(kind, server, tmp_path, *options)
    discard = _discard(frames)
    assert discard["title"] == f"read_file: not run, {title}"
    assert discard["_meta"]["discardReason"] == reason
    assert discard["status"] == "failed" and discard["content"] == []
    assert discard["_meta"]["preparationDiscarded"] is True
    assert discard["_meta"]["toolName"] == "read_file"
    check_cards(frames)
    if scenario == "error":
        assert "error" in reply
    else:
        assert reply["result"]["stopReason"] == "end_turn"
