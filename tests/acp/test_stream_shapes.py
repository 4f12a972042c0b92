"""Recorded stream shapes from OpenAI-compatible servers, through the real agent over stdio.

Each test replays a provider transcript from ``tests/fixtures/providers`` on the
loopback server and checks what the editor sees: the cards and their terminal
updates, the prompt's stop reason or error, and what went back to the model.
The transcripts call ``get_weather``; the agent has no such tool, so the tests
rename it to ``read_file`` (and its argument to ``path``) before serving them,
leaving the shape of the stream as recorded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.runtime import scenarios as sc
from tests.support.acp_schema import validate_agent_message
from tests.support.agent_process import AgentProcess, agent_command
from tests.support.fixtures import PROVIDER_TRANSCRIPTS
from tests.support.runtime_harness import check_cards, lifecycle
from toolprep.testing import FakeProviderServer, ScriptedResponse, split_sse_events

NOTES = "notes.txt"


def _as_read_file(fixture: str) -> ScriptedResponse:
    """The transcript with its ``get_weather(city)`` calls made ``read_file(path)`` calls."""
    text = (PROVIDER_TRANSCRIPTS / fixture).read_text(encoding="utf-8")
    text = text.replace("get_weather", "read_file").replace('\\"city\\"', '\\"path\\"')
    text = text.replace("Paris", NOTES).replace("Oslo", "other.txt")
    return ScriptedResponse(events=split_sse_events(text))


def _run(
    server: FakeProviderServer, tmp_path: Path, *options: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    (tmp_path / NOTES).write_text("the notes\n", encoding="utf-8")
    command, env = agent_command("openai", server, "--no-persist", *options)
    agent = AgentProcess(command, env, tmp_path, tmp_path / "stderr.log")
    try:
        session_id = agent.start_session(tmp_path)
        reply = agent.reply(agent.prompt(session_id, "read my notes"))
        validate_agent_message(reply)
        frames = agent.updates(session_id)
        agent.close_input()
        assert agent.wait_exit() == 0
    finally:
        agent.kill()
    check_cards(frames)
    return reply, frames


def _tool_calls_sent_back(body: Any) -> list[dict[str, Any]]:
    return [c for m in body["messages"] for c in m.get("tool_calls") or ()]


def test_a_new_id_on_every_fragment_at_one_index_is_one_call(tmp_path: Path) -> None:
    """The OCI recording: the call runs once, with all its arguments, and the turn goes on."""
    with FakeProviderServer() as server:
        server.enqueue(
            _as_read_file("openai-oci-proxy-new-id-each-fragment.sse"),
            sc.ok(sc.text_turn("openai", "Your notes say hello.")),
        )
        reply, frames = _run(server, tmp_path)
        requests = list(server.requests)
    assert reply["result"]["stopReason"] == "end_turn", reply
    call_id = "chatcmpl-tool-a91e77be296474b3"
    assert lifecycle(frames) == {call_id: ["preparing", "in_progress", "completed"]}
    [done] = [f for f in frames if f.get("status") == "completed"]
    assert "the notes" in str(done["content"])
    assert len(requests) == 2
    [sent] = _tool_calls_sent_back(requests[1].body)
    assert sent["id"] == call_id
    assert sent["function"] == {"name": "read_file", "arguments": '{"path":"notes.txt"}'}


def test_a_call_without_a_name_is_never_run_and_its_card_says_why(tmp_path: Path) -> None:
    with FakeProviderServer() as server:
        server.enqueue(
            _as_read_file("openai-synthetic-call-without-name.sse"),
            sc.ok(sc.text_turn("openai", "Read one file.")),
        )
        reply, frames = _run(server, tmp_path)
        requests = list(server.requests)
    assert reply["result"]["stopReason"] == "end_turn", reply
    assert lifecycle(frames) == {
        "call_named": ["preparing", "in_progress", "completed"],
        "call_nameless": ["discarded"],
    }
    [card] = [f for f in frames if f.get("toolCallId") == "call_nameless"]
    assert card["sessionUpdate"] == "tool_call" and card["status"] == "failed"
    assert card["title"] == (
        "tool call without a name: not run, the model did not say which tool to call"
    )
    assert card["_meta"]["discardReason"] == "no_tool_name"
    assert "name" not in card and "rawInput" not in card
    # Only the named call goes back to the model; nothing with an empty name.
    sent = _tool_calls_sent_back(requests[1].body)
    assert [c["function"]["name"] for c in sent] == ["read_file"]
    results = [m for m in requests[1].body["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == ["call_named"]


def test_an_in_stream_tool_use_failed_error_is_retried(tmp_path: Path) -> None:
    """Groq's in-stream ``tool_use_failed``: the retry samples again and the turn succeeds."""
    with FakeProviderServer() as server:
        server.enqueue(
            ScriptedResponse.from_fixture(
                PROVIDER_TRANSCRIPTS / "openai-groq-tool-use-failed-in-stream.sse"
            ),
            sc.ok(sc.text_turn("openai", "Second try worked.")),
        )
        reply, frames = _run(server, tmp_path, "--max-retry-wait", "0.01")
        attempts = len(server.requests)
    assert reply["result"]["stopReason"] == "end_turn", reply
    assert attempts == 2
    notices = [f for f in frames if (f.get("_meta") or {}).get("retry")]
    [notice] = notices
    text = notice["content"]["text"]
    assert "could not read the model's tool call (tool_use_failed)" in text
    assert "retrying in" in text


def test_an_in_stream_error_that_is_not_retried_ends_the_prompt_readably(tmp_path: Path) -> None:
    with FakeProviderServer() as server:
        server.enqueue(
            ScriptedResponse.from_fixture(
                PROVIDER_TRANSCRIPTS / "openai-groq-tool-use-failed-in-stream.sse"
            )
        )
        reply, _frames = _run(server, tmp_path, "--max-retries", "0")
    validate_agent_message(reply)
    error = reply["error"]
    assert error["code"] == -32010, error  # the model request failed; not an internal error
    assert error["message"].startswith(
        "The model request failed: the provider could not read the model's tool call "
        "(tool_use_failed)"
    ), error
