"""A session nearing the context window is compacted, over stdio on both wires.

The agent runs with ``--context-window 100``: a request reported at 90 tokens
passes the default ``--compact-at 0.8``, so the next request of the session
first asks the model for a summary of the older messages and then sends the
summary and the recent messages verbatim. The fake provider records every
request, which is what these tests read; the editor's frames and a
``session/load`` in a second agent show what the user sees.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.runtime import scenarios as sc
from tests.support.agent_process import AgentProcess, agent_command
from tests.support.runtime_harness import check_cards
from toolprep.runtime.kernel.compaction import SUMMARY_HEADER, SUMMARY_INSTRUCTION
from toolprep.testing import FakeProviderServer, ScriptedResponse

KINDS = ["anthropic", "openai"]
SUMMARY = "The user asked a first question; the agent ran a command and answered."


def _agent(kind: str, server: FakeProviderServer, data_dir: Path, cwd: Path) -> AgentProcess:
    command, env = agent_command(
        kind,
        server,
        "--allow-shell",
        "--data-dir",
        str(data_dir),
        "--context-window",
        "100",
    )
    return AgentProcess(command, env, cwd, cwd / f"stderr-{os.urandom(4).hex()}.log")


def _answer(kind: str, text: str, tokens: int = 30) -> ScriptedResponse:
    """A text reply whose usage reports ``tokens`` (20 of them output)."""
    if kind == "anthropic":
        return sc.ok(sc.anthropic_sse(text=text, input_tokens=tokens - 20, output_tokens=20))
    return sc.ok(sc.openai_sse(text=text, prompt_tokens=tokens - 20, completion_tokens=20))


def _first_turn(kind: str, server: FakeProviderServer) -> None:
    """A tool call, then an answer whose request filled 90 of the 100-token window."""
    server.enqueue(
        sc.ok(sc.calls_turn(kind, [sc.shell("echo one", "call_one")])),
        _answer(kind, "First answer.", tokens=90),
    )


def _messages(body: dict[str, Any]) -> list[tuple[str, str]]:
    """``(role, text)`` of each message a request sent, the system prompt left out."""
    said = []
    for message in body["messages"]:
        if message["role"] == "system":
            continue
        content = message.get("content")
        if isinstance(content, str):
            text = content
        elif content is None:
            text = ""
        else:
            text = "".join(b.get("text", "") for b in content if b.get("type") == "text")
        said.append((message["role"], text))
    return said


def _numbered_meta(frame: dict[str, Any]) -> dict[str, Any]:
    """The frame's ``_meta`` besides its number in the session's log (which it must have)."""
    meta = dict(frame["_meta"])
    seq = meta.pop("toolprep")["seq"]
    assert isinstance(seq, int) and seq >= 1
    return meta


def _of_kind(frames: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [f for f in frames if f["sessionUpdate"] == kind]


def _replied(frames: list[dict[str, Any]]) -> str:
    """The agent's reply text in ``frames``."""
    return "".join(f["content"]["text"] for f in _of_kind(frames, "agent_message_chunk"))


def _prompt(agent: AgentProcess, session_id: str, text: str) -> None:
    reply = agent.reply(agent.prompt(session_id, text))
    assert reply["result"]["stopReason"] == "end_turn", reply


@pytest.mark.parametrize("kind", KINDS)
def test_a_full_window_is_summarised_and_a_loaded_session_goes_on_from_the_summary(
    kind: str, tmp_path: Path
) -> None:
    data_dir, cwd = tmp_path / "data", tmp_path / "work"
    cwd.mkdir()
    with FakeProviderServer() as server:
        _first_turn(kind, server)
        server.enqueue(_answer(kind, SUMMARY), _answer(kind, "Second answer."))
        first = _agent(kind, server, data_dir, cwd)
        try:
            session_id = first.start_session(cwd)
            _prompt(first, session_id, "first question")
            _prompt(first, session_id, "second question")
            sent = first.updates(session_id)
            first.close_input()
            assert first.wait_exit() == 0
        finally:
            first.kill()
        summary_request, after = (r.body for r in server.requests[2:4])

        server.enqueue(_answer(kind, "Third answer."))
        second = _agent(kind, server, data_dir, cwd)
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
        loaded_request = server.requests[-1].body
    assert len(server.requests) == 5

    # The summary request: the same model, the older messages as a transcript, no tools.
    assert summary_request["model"] == after["model"]
    assert SUMMARY_INSTRUCTION in str(summary_request)
    [(role, transcript)] = _messages(summary_request)
    assert role == "user"
    assert "first question" in transcript and "echo one" in transcript
    assert "First answer." not in transcript  # the recent messages are not summarised
    assert not summary_request.get("tools")

    # The next request: the summary, then the recent messages verbatim.
    assert _messages(after) == [
        ("user", SUMMARY_HEADER + SUMMARY),
        ("assistant", "First answer."),
        ("user", "second question"),
    ]

    # The editor was told, between the first answer and the second.
    [note] = [f for f in _of_kind(sent, "agent_thought_chunk") if "compact" in str(f)]
    assert note["content"]["text"] == (
        "\n[compacted 3 earlier messages into a summary to stay within the model's "
        "context window]\n"
    )
    assert _numbered_meta(note) == {"compaction": {"summarisedMessages": 3}}
    at = sent.index(note)
    assert _replied(sent[:at]) == "First answer."
    assert _replied(sent[at:]) == "Second answer."
    assert SUMMARY not in str(sent)  # the summary itself is the model's, not a reply
    check_cards(sent)

    # A load replays every frame first sent (the prompts come along), compaction or not.
    shown = [f for f in replayed if f["sessionUpdate"] != "user_message_chunk"]
    assert shown == sent
    prompts = [f["content"]["text"] for f in _of_kind(replayed, "user_message_chunk")]
    assert prompts == ["first question", "second question"]

    # The loaded session goes on from the compacted history.
    assert _messages(loaded_request) == [
        ("user", SUMMARY_HEADER + SUMMARY),
        ("assistant", "First answer."),
        ("user", "second question"),
        ("assistant", "Second answer."),
        ("user", "third question"),
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_a_failed_summary_leaves_the_turn_working_on_the_full_history(
    kind: str, tmp_path: Path
) -> None:
    data_dir, cwd = tmp_path / "data", tmp_path / "work"
    cwd.mkdir()
    failed = ScriptedResponse(status=500, body={"error": {"message": "summary broke"}})
    with FakeProviderServer() as server:
        _first_turn(kind, server)
        server.enqueue(failed, _answer(kind, "Second answer."))
        agent = _agent(kind, server, data_dir, cwd)
        try:
            session_id = agent.start_session(cwd)
            _prompt(agent, session_id, "first question")
            _prompt(agent, session_id, "second question")
            frames = agent.updates(session_id)
            agent.close_input()
            assert agent.wait_exit() == 0
        finally:
            agent.kill()
        after = server.requests[3].body
    assert len(server.requests) == 4
    tool = "user" if kind == "anthropic" else "tool"
    assert [role for role, _ in _messages(after)] == [
        "user",
        "assistant",
        tool,
        "assistant",
        "user",
    ]
    assert "echo one" in str(after)  # the tool call went out verbatim
    assert SUMMARY_HEADER not in str(after)
    [note] = [f for f in _of_kind(frames, "agent_thought_chunk") if "compact" in str(f)]
    assert note["content"]["text"].startswith("\n[could not compact the conversation (")
    assert note["content"]["text"].endswith("); continuing with the full history]\n")
    assert "summary broke" in note["content"]["text"]
    assert set(note["_meta"]["compaction"]) == {"failed"}
    assert _replied(frames) == "First answer.Second answer."
    check_cards(frames)


@pytest.mark.parametrize("kind", KINDS)
def test_a_cancel_while_summarising_ends_the_turn_and_closes_the_summary_request(
    kind: str, tmp_path: Path
) -> None:
    data_dir, cwd = tmp_path / "data", tmp_path / "work"
    cwd.mkdir()
    stalled = ScriptedResponse(events=sc.text_turn(kind, SUMMARY), stall_after=2)
    with FakeProviderServer() as server:
        _first_turn(kind, server)
        server.enqueue(stalled, _answer(kind, "Third answer."))
        agent = _agent(kind, server, data_dir, cwd)
        try:
            session_id = agent.start_session(cwd)
            _prompt(agent, session_id, "first question")
            asked = agent.prompt(session_id, "second question")
            agent.wait_for(lambda _: len(server.requests) == 3)
            agent.send(
                {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session_id}}
            )
            assert agent.reply(asked)["result"]["stopReason"] == "cancelled"
            agent.wait_for(lambda _: server.disconnects == 1)  # the summary request was closed
            _prompt(agent, session_id, "third question")
            frames = agent.updates(session_id)
            agent.close_input()
            assert agent.wait_exit() == 0
        finally:
            agent.kill()
        summarising, after = (r.body for r in server.requests[2:4])
    assert len(server.requests) == 4
    assert SUMMARY_INSTRUCTION in str(summarising)  # the cancel came during the summary
    # Nothing was compacted: the next request sends the whole history.
    assert "echo one" in str(after) and SUMMARY_HEADER not in str(after)
    assert [f for f in _of_kind(frames, "agent_thought_chunk") if "compact" in str(f)] == []
    assert _replied(frames) == "First answer.Third answer."
    check_cards(frames)


def _tool_pairs(kind: str, body: dict[str, Any]) -> list[tuple[str, str]]:
    """``(call, result)`` ids in message order: each call id, then each result's."""
    seen: list[tuple[str, str]] = []
    for message in body["messages"]:
        if kind == "openai":
            seen += [("call", c["id"]) for c in message.get("tool_calls") or ()]
            if message["role"] == "tool":
                seen.append(("result", message["tool_call_id"]))
            continue
        content = message.get("content")
        for block in content if isinstance(content, list) else ():
            if block.get("type") == "tool_use":
                seen.append(("call", block["id"]))
            elif block.get("type") == "tool_result":
                seen.append(("result", block["tool_use_id"]))
    return seen


@pytest.mark.parametrize("kind", KINDS)
def test_a_long_turn_is_compacted_between_its_tool_calls_without_splitting_a_pair(
    kind: str, tmp_path: Path
) -> None:
    data_dir, cwd = tmp_path / "data", tmp_path / "work"
    cwd.mkdir()
    if kind == "anthropic":
        full = sc.anthropic_sse(
            tool_calls=[sc.shell("echo two", "call_two")], input_tokens=70, output_tokens=20
        )
    else:
        full = sc.openai_sse(
            tool_calls=[sc.shell("echo two", "call_two")], prompt_tokens=70, completion_tokens=20
        )
    with FakeProviderServer() as server:
        server.enqueue(
            sc.ok(sc.calls_turn(kind, [sc.shell("echo one", "call_one")])),
            sc.ok(full),
            _answer(kind, SUMMARY),
            _answer(kind, "Both ran."),
        )
        agent = _agent(kind, server, data_dir, cwd)
        try:
            session_id = agent.start_session(cwd)
            _prompt(agent, session_id, "run two commands")
            frames = agent.updates(session_id)
            agent.close_input()
            assert agent.wait_exit() == 0
        finally:
            agent.kill()
        summarising, after = (r.body for r in server.requests[2:4])
    assert len(server.requests) == 4
    [(_, transcript)] = _messages(summarising)
    assert "echo one" in transcript and "echo two" not in transcript
    # The summary, then the second call with its result: the first pair went into the summary.
    assert _messages(after)[0] == ("user", SUMMARY_HEADER + SUMMARY)
    assert _tool_pairs(kind, after) == [("call", "call_two"), ("result", "call_two")]
    [note] = [f for f in _of_kind(frames, "agent_thought_chunk") if "compact" in str(f)]
    assert _numbered_meta(note) == {"compaction": {"summarisedMessages": 3}}
    assert _replied(frames) == "Both ran."
    check_cards(frames)


OVERFLOWS: list[tuple[str, int, dict[str, Any]]] = [
    (
        "anthropic",
        413,
        {"type": "error", "error": {"type": "request_too_large", "message": "Request too large"}},
    ),
    (
        "anthropic",
        400,
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "prompt is too long: 210000 tokens > 200000 maximum",
            },
        },
    ),
    ("openai", 413, {"error": {"message": "Request too large", "type": "invalid_request_error"}}),
    (
        "openai",
        400,
        {
            "error": {
                "message": "This model's maximum context length is 128000 tokens. However, "
                "your messages resulted in 130000 tokens.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        },
    ),
]


@pytest.mark.parametrize(("kind", "status", "body"), OVERFLOWS)
def test_a_request_refused_as_too_large_is_compacted_and_sent_again(
    kind: str, status: int, body: dict[str, Any], tmp_path: Path
) -> None:
    data_dir, cwd = tmp_path / "data", tmp_path / "work"
    cwd.mkdir()
    too_large = ScriptedResponse(status=status, body=body)
    with FakeProviderServer() as server:
        # The first answer reports little usage: only the refusal says the window is full.
        server.enqueue(_answer(kind, "First answer."), too_large)
        server.enqueue(_answer(kind, SUMMARY), _answer(kind, "Second answer."))
        agent = _agent(kind, server, data_dir, cwd)
        try:
            session_id = agent.start_session(cwd)
            _prompt(agent, session_id, "first question")
            _prompt(agent, session_id, "second question")
            frames = agent.updates(session_id)
            agent.close_input()
            assert agent.wait_exit() == 0
        finally:
            agent.kill()
        refused, summarising, after = (r.body for r in server.requests[1:4])
    assert len(server.requests) == 4
    assert len(_messages(refused)) == 3
    assert SUMMARY_INSTRUCTION in str(summarising)
    assert _messages(after) == [
        ("user", SUMMARY_HEADER + SUMMARY),
        ("assistant", "First answer."),
        ("user", "second question"),
    ]
    [note] = [f for f in _of_kind(frames, "agent_thought_chunk") if "compact" in str(f)]
    assert _numbered_meta(note) == {"compaction": {"summarisedMessages": 1}}
    assert _replied(frames) == "First answer.Second answer."
    check_cards(frames)


@pytest.mark.parametrize("kind", KINDS)
def test_a_first_prompt_too_large_for_the_window_fails_with_the_providers_reason(
    kind: str, tmp_path: Path
) -> None:
    data_dir, cwd = tmp_path / "data", tmp_path / "work"
    cwd.mkdir()
    [(_, _, body)] = [o for o in OVERFLOWS if o[:2] == (kind, 413)]
    too_large = ScriptedResponse(status=413, body=body)
    with FakeProviderServer() as server:
        server.enqueue(too_large, too_large)
        agent = _agent(kind, server, data_dir, cwd)
        try:
            session_id = agent.start_session(cwd)
            reply = agent.reply(agent.prompt(session_id, "a huge question"))
            agent.close_input()
            assert agent.wait_exit() == 0
        finally:
            agent.kill()
    # Nothing older than the prompt to summarise: sent once more as it was, then refused.
    assert len(server.requests) == 2
    assert server.requests[0].body == server.requests[1].body
    assert "Request too large" in str(reply["error"]), reply
