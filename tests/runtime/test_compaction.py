"""Where compaction cuts a history, and what it sends and keeps (``runtime.compaction``).

The cut must never separate a tool call from its result: a provider rejects a
result whose call it never saw, and a call left without its result.
"""

from __future__ import annotations

import pytest

from toolprep.messages.content import (
    Content,
    FunctionCall,
    FunctionCallPart,
    FunctionResponse,
    FunctionResponsePart,
    TextPart,
    ThoughtPart,
)
from toolprep.messages.requests import StreamError
from toolprep.runtime.kernel.compaction import (
    SUMMARY_HEADER,
    CompactionPolicy,
    check_compact_at,
    compaction_note,
    context_overflow,
    oversized_prompt,
    prompt_too_large_message,
    render_transcript,
    split_history,
    summary_message,
    summary_prompt,
)


def _user(text: str) -> Content:
    return Content("user", (TextPart(text),))


def _answer(text: str) -> Content:
    return Content("model", (TextPart(text),))


def _calls(*ids: str) -> Content:
    return Content(
        "model",
        (
            ThoughtPart("private reasoning", "sig"),
            *(FunctionCallPart(FunctionCall(i, "read_file", {"path": f"{i}.txt"})) for i in ids),
        ),
    )


def _results(*ids: str) -> Content:
    return Content(
        "user",
        tuple(
            FunctionResponsePart(FunctionResponse(i, "read_file", {"output": f"text of {i}"}))
            for i in ids
        ),
    )


LONG_SESSION = (
    _user("first question"),
    _calls("a", "b"),
    _results("a", "b"),
    _calls("c"),
    _results("c"),
    _answer("first answer " * 20),
    _user("second question"),
    _calls("d"),
    _results("d"),
    _answer("second answer"),
    _user("third question"),
    _calls("e", "f"),
    _results("e", "f"),
)


def _call_ids(history: tuple[Content, ...]) -> set[str]:
    return {p.function_call.id for c in history for p in c.parts if isinstance(p, FunctionCallPart)}


def _result_ids(history: tuple[Content, ...]) -> set[str]:
    return {
        p.function_response.id
        for c in history
        for p in c.parts
        if isinstance(p, FunctionResponsePart)
    }


@pytest.mark.parametrize("keep_tokens", [0, 1, 50, 200, 400, 700, 1_000, 10_000])
def test_no_cut_separates_a_call_from_its_result(keep_tokens: int) -> None:
    split = split_history(LONG_SESSION, used=1_000, keep_tokens=keep_tokens)
    assert split is not None
    older, recent = LONG_SESSION[: split.at], LONG_SESSION[split.at :]
    assert older, "something is always summarised"
    assert recent[0].role == "model"  # after the summary (a user message) roles alternate
    assert _call_ids(older) == _result_ids(older)
    assert _call_ids(recent) == _result_ids(recent)


def test_the_cut_keeps_as_much_as_the_budget_allows_and_at_least_the_last_exchange() -> None:
    cuts = [i for i, c in enumerate(LONG_SESSION) if c.role == "model"]
    # Nothing fits: the cut goes before the last model message.
    assert split_history(LONG_SESSION, used=1_000, keep_tokens=0) == split_history(
        LONG_SESSION, used=1_000, keep_tokens=1
    )
    none_fit = split_history(LONG_SESSION, used=1_000, keep_tokens=0)
    assert none_fit is not None and none_fit.at == cuts[-1]
    # Everything fits: only the first message is summarised.
    all_fit = split_history(LONG_SESSION, used=1_000, keep_tokens=10_000)
    assert all_fit is not None and all_fit.at == 1
    # In between, a larger budget keeps more, never less.
    previous = len(LONG_SESSION)
    for keep in range(0, 1_100, 50):
        split = split_history(LONG_SESSION, used=1_000, keep_tokens=keep)
        assert split is not None and split.at <= previous
        previous = split.at


def test_a_tail_is_kept_only_while_its_estimated_share_fits() -> None:
    # Four equal messages, 400 tokens used: each is about 100 of them.
    history = (_user("q" * 40), _answer("a" * 40), _user("q" * 40), _answer("a" * 40))
    last_only = split_history(history, used=400, keep_tokens=150)
    assert last_only is not None and last_only.at == 3
    three = split_history(history, used=400, keep_tokens=350)
    assert three is not None and three.at == 1


@pytest.mark.parametrize(
    "history",
    [(), (_user("only a question"),), (_user("a"), _results("x"))],
)
def test_a_history_without_a_model_message_after_the_first_is_not_cut(
    history: tuple[Content, ...],
) -> None:
    assert split_history(history, used=1_000, keep_tokens=0) is None


def test_the_summary_request_is_one_user_message_with_the_transcript_and_no_tool_pairs() -> None:
    [message] = summary_prompt(LONG_SESSION[:6])
    assert message.role == "user"
    [part] = message.parts
    assert isinstance(part, TextPart)
    assert part.text.startswith("Summarise this conversation:\n\nUser: first question\n\n")
    assert '[tool call read_file {"path":"a.txt"}]' in part.text
    assert "[tool result of read_file: text of c]" in part.text
    assert "private reasoning" not in part.text  # reasoning is not the conversation


def test_a_failed_tool_reads_as_an_error_in_the_transcript() -> None:
    failed = Content(
        "user",
        (
            FunctionResponsePart(
                FunctionResponse("x", "run_shell_command", {"error": "exit 1"}, is_error=True)
            ),
        ),
    )
    assert render_transcript((failed,)) == "Tools: [tool error of run_shell_command: exit 1]"


def test_the_summary_stands_in_as_a_user_message() -> None:
    assert summary_message("what happened") == _user(SUMMARY_HEADER + "what happened")
    assert compaction_note(1) == {
        "sessionUpdate": "agent_thought_chunk",
        "content": {
            "type": "text",
            "text": "\n[compacted 1 earlier message into a summary to stay within the "
            "model's context window]\n",
        },
        "_meta": {"compaction": {"summarisedMessages": 1}},
    }


def test_the_policy_compacts_from_its_fraction_and_zero_turns_it_off() -> None:
    policy = CompactionPolicy(at=0.8, keep=0.25)
    assert not policy.due(79, 100)
    assert policy.due(80, 100)
    assert policy.keep_tokens(1_000) == 250
    assert not CompactionPolicy(at=0).due(1_000, 100)


@pytest.mark.parametrize("fraction", [-0.1, 1.5, float("nan")])
def test_a_fraction_outside_zero_to_one_is_refused(fraction: float) -> None:
    with pytest.raises(ValueError, match="--compact-at must be a fraction"):
        check_compact_at(fraction)


@pytest.mark.parametrize(
    ("error", "overflow"),
    [
        (StreamError("Request too large", retryable=False, kind="request_too_large"), True),
        (StreamError("too big", retryable=False, kind="invalid_request", status=413), True),
        (
            StreamError(
                "prompt is too long: 210000 tokens > 200000 maximum",
                retryable=False,
                kind="invalid_request",
                status=400,
            ),
            True,
        ),
        (
            StreamError(
                "This model's maximum context length is 128000 tokens.",
                retryable=False,
                kind="invalid_request",
                status=400,
            ),
            True,
        ),
        (StreamError("messages: field required", retryable=False, kind="invalid_request"), False),
        (StreamError("context length of the queue", retryable=True, kind="server"), False),
        (StreamError("Overloaded", retryable=True, kind="overloaded", status=529), False),
    ],
)
def test_a_request_over_the_window_is_told_from_other_failures(
    error: StreamError, overflow: bool
) -> None:
    assert context_overflow(error) is overflow


def test_only_a_prompt_certainly_over_the_window_is_refused_up_front() -> None:
    """Up to 8 bytes a token is allowed: what comes nearer the window, the provider judges."""
    assert not oversized_prompt((TextPart("x" * 800),), 100)
    assert oversized_prompt((TextPart("x" * 801),), 100)
    assert oversized_prompt((TextPart("x" * 400), TextPart("é" * 201)), 100)  # bytes, not chars


@pytest.mark.parametrize("reason", [None, "Request too large"])
def test_a_refused_prompt_is_told_its_size_the_window_and_what_to_do(reason: str | None) -> None:
    message = prompt_too_large_message((TextPart("x" * 12_345),), 100, reason)
    assert "12,345 characters, about 3,087 tokens" in message
    assert "context window" in message and "100 tokens" in message
    assert "not part of the conversation" in message
    assert "Send a shorter message" in message and "read it" in message
    assert (reason is not None) == ("Request too large" in message)
