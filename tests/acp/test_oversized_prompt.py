"""A message too big for the model's context window is refused, and the session goes on.

The agent runs with ``--context-window 100`` and a store. A message far over
the window (2,000 characters) is refused before anything is sent; one that
only the provider can judge (600 characters) is refused by it (413, twice: the
turn compacts the older history and tries once more). Either way the editor
gets a -32602 that says how big the message was, the window and what to do,
the message leaves the history, and the next prompt, in the same process or in
a new one after ``session/load``, is sent without it and answered. In one
process (``--workers 1``) and with the session in a worker (``--workers 2``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import pytest

from tests.runtime import scenarios as sc
from tests.support.agent_process import AgentProcess, agent_command
from toolprep.runtime.acp.errors import INVALID_PARAMS
from toolprep.runtime.kernel.compaction import SUMMARY_HEADER
from toolprep.testing import FakeProviderServer, ScriptedResponse

KIND = "anthropic"
SUMMARY = "The user asked a first question and got an answer."
TOO_LARGE = ScriptedResponse(
    status=413,
    body={"type": "error", "error": {"type": "request_too_large", "message": "Request too large"}},
)

Refusal = Literal["up_front", "by_provider"]
# Over 8 bytes per token of the window: refused up front. Under it: only the provider knows.
SIZES: dict[Refusal, int] = {"up_front": 2_000, "by_provider": 600}


def _agent(server: FakeProviderServer, data_dir: Path, cwd: Path, workers: int) -> AgentProcess:
    command, env = agent_command(
        KIND,
        server,
        "--data-dir",
        str(data_dir),
        "--context-window",
        "100",
        "--workers",
        str(workers),
    )
    return AgentProcess(command, env, cwd, cwd / f"stderr-{os.urandom(4).hex()}.log")


def _answer(text: str) -> ScriptedResponse:
    return sc.ok(sc.anthropic_sse(text=text, input_tokens=10, output_tokens=20))


def _prompt(agent: AgentProcess, session_id: str, text: str) -> None:
    reply = agent.reply(agent.prompt(session_id, text))
    assert reply["result"]["stopReason"] == "end_turn", reply


def _messages(body: dict[str, Any]) -> list[tuple[str, str]]:
    """``(role, text)`` of each message a request sent."""
    said = []
    for message in body["messages"]:
        content = message["content"]
        text = content if isinstance(content, str) else "".join(b.get("text", "") for b in content)
        said.append((message["role"], text))
    return said


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("refusal", ["up_front", "by_provider"])
def test_an_oversized_message_is_refused_and_the_session_goes_on_without_it(
    refusal: Refusal, workers: int, tmp_path: Path
) -> None:
    data_dir, cwd = tmp_path / "data", tmp_path / "work"
    cwd.mkdir()
    huge = "x" * (SIZES[refusal] - 6) + " tail."
    with FakeProviderServer() as server:
        server.enqueue(_answer("First answer."))
        if refusal == "by_provider":
            server.enqueue(TOO_LARGE, _answer(SUMMARY), TOO_LARGE)
        server.enqueue(_answer("Second answer."))
        first = _agent(server, data_dir, cwd, workers)
        try:
            session_id = first.start_session(cwd)
            _prompt(first, session_id, "first question")
            refused = first.reply(first.prompt(session_id, huge))
            sent_before = len(server.requests)
            _prompt(first, session_id, "second question")
            frames = first.updates(session_id)
            first.close_input()
            assert first.wait_exit() == 0
        finally:
            first.kill()
        after = server.requests[sent_before].body

        server.enqueue(_answer("Third answer."))
        second = _agent(server, data_dir, cwd, workers)
        try:
            second.start_session(cwd)
            load = {"sessionId": session_id, "cwd": str(cwd), "mcpServers": []}
            assert "result" in second.reply(second.request("session/load", load))
            replayed = second.updates(session_id)
            _prompt(second, session_id, "third question")
            second.close_input()
            assert second.wait_exit() == 0
        finally:
            second.kill()
        loaded = server.requests[-1].body

    # The next prompt goes out without it, over the history the session had.
    start = (
        [("user", SUMMARY_HEADER + SUMMARY)]
        if refusal == "by_provider"
        else [("user", "first question")]
    )
    assert _messages(after) == [
        *start,
        ("assistant", "First answer."),
        ("user", "second question"),
    ]
    assert _messages(loaded) == [
        *start,
        ("assistant", "First answer."),
        ("user", "second question"),
        ("assistant", "Second answer."),
        ("user", "third question"),
    ]

    # A specific error the editor can show: the size, the window, what to do instead.
    error = refused["error"]
    assert error["code"] == INVALID_PARAMS, refused
    assert f"{len(huge):,} characters" in error["message"]
    assert "window of 100 tokens" in error["message"]
    assert "Send a shorter message" in error["message"] and "file" in error["message"]
    if refusal == "by_provider":
        assert "Request too large" in error["message"]
        assert len(server.requests) == 6  # first, refused, summary, refused, second, third
    else:
        assert len(server.requests) == 3  # the huge message never went out

    # The stored transcript never shows the message as answered.
    said = [f for f in replayed if f["sessionUpdate"] == "user_message_chunk"]
    notes = [f for f in replayed if "contextOverflow" in f.get("_meta", {})]
    live_notes = [f for f in frames if "contextOverflow" in f.get("_meta", {})]
    if refusal == "by_provider":  # recorded when it was accepted; the note says what came of it
        assert [f["content"]["text"] for f in said] == ["first question", huge, "second question"]
        [note] = notes
        assert note["sessionUpdate"] == "agent_thought_chunk"
        assert error["message"] in note["content"]["text"]
        assert replayed.index(said[1]) < replayed.index(note) < replayed.index(said[2])
        assert [n["content"] for n in live_notes] == [note["content"]]
    else:
        assert [f["content"]["text"] for f in said] == ["first question", "second question"]
        assert notes == live_notes == []
