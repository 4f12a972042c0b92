"""AnthropicStreamAdapter rules, event by event, without a network."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.providers.helpers import flat, run_adapter, summarize, summarize_all
from toolprep.messages.content import FinishReason, GenerateContentResponse, response_to_dict
from toolprep.messages.preparation import get_preparations
from toolprep.runtime.providers.anthropic_adapter import (
    REDACTED_THINKING_PREFIX,
    AnthropicStreamAdapter,
)
from toolprep.runtime.providers.base import StreamError
from toolprep.runtime.providers.sse import decode_sse
from toolprep.testing import anthropic_sse

START = {
    "type": "message_start",
    "message": {
        "id": "msg_1",
        "model": "claude-x",
        "usage": {"input_tokens": 5, "output_tokens": 1},
    },
}
STOP_DELTA = {
    "type": "message_delta",
    "delta": {"stop_reason": "tool_use"},
    "usage": {"output_tokens": 9},
}


def tool_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "content_block_start",
        "index": index,
        "content_block": {"type": "tool_use", **block},
    }


def json_delta(index: int, fragment: str) -> dict[str, Any]:
    return {
        "type": "content_block_delta",
        "index": index,
        "delta": {"type": "input_json_delta", "partial_json": fragment},
    }


def block_stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def feed_all(
    adapter: AnthropicStreamAdapter, events: list[dict[str, Any]]
) -> list[GenerateContentResponse]:
    out: list[GenerateContentResponse] = []
    for event in events:
        out += adapter.feed(event["type"], json.dumps(event))
    return out


def test_preparation_comes_at_block_start_before_any_argument_data() -> None:
    adapter = AnthropicStreamAdapter()
    assert adapter.feed("message_start", json.dumps(START)) == []
    opened = adapter.feed(
        "content_block_start",
        json.dumps(tool_start(0, {"id": "toolu_1", "name": "read_file", "input": {}})),
    )
    assert [summarize(c) for c in opened] == [("prep toolu_1 read_file",)]
    assert opened[0].parts == ()  # an otherwise empty chunk
    for fragment in ("", '{"pa', 'th": "a', '.txt"}'):
        assert adapter.feed("content_block_delta", json.dumps(json_delta(0, fragment))) == []
    closed = adapter.feed("content_block_stop", json.dumps(block_stop(0)))
    assert [summarize(c) for c in closed] == [('call toolu_1 read_file {"path": "a.txt"}',)]
    assert get_preparations(closed[0]) == ()


def test_chunks_carry_response_id_and_model() -> None:
    chunks = run_adapter(
        AnthropicStreamAdapter(),
        anthropic_sse(
            text="hi",
            tool_calls=[("toolu_1", "glob", {"pattern": "*"})],
            message_id="msg_9",
            model="m-1",
        ),
    )
    assert chunks
    assert {(c.response_id, c.model) for c in chunks} == {("msg_9", "m-1")}


@pytest.mark.parametrize(
    "block",
    [
        {"name": "read_file"},
        {"id": "", "name": "read_file"},
        {"id": 42, "name": "read_file"},
        {"id": None, "name": "read_file"},
        {"id": "toolu_x"},
        {"id": "toolu_x", "name": ""},
        {"id": "toolu_x", "name": 7},
        {"id": "toolu_x", "name": None},
    ],
    ids=[
        "no-id",
        "empty-id",
        "int-id",
        "null-id",
        "no-name",
        "empty-name",
        "int-name",
        "null-name",
    ],
)
def test_no_preparation_without_usable_identity_but_call_still_emitted(
    block: dict[str, Any],
) -> None:
    adapter = AnthropicStreamAdapter()
    out = feed_all(
        adapter,
        [
            START,
            tool_start(0, {**block, "input": {}}),
            json_delta(0, '{"a": 1}'),
            block_stop(0),
            STOP_DELTA,
            {"type": "message_stop"},
        ],
    )
    assert all(get_preparations(c) == () for c in out)
    calls = [fc for c in out for fc in c.function_calls]
    assert len(calls) == 1
    assert calls[0].args == {"a": 1}
    good_id = isinstance(block.get("id"), str) and block["id"]
    assert calls[0].id == (block["id"] if good_id else "toolu_gen_1")
    good_name = isinstance(block.get("name"), str)
    assert calls[0].name == (block["name"] if good_name else "")


def test_parallel_calls_each_prepared_then_completed_in_order() -> None:
    calls = [(f"toolu_{n}", "read_file", {"path": f"f{n}.txt"}) for n in range(3)]
    items = flat(
        run_adapter(AnthropicStreamAdapter(), anthropic_sse(tool_calls=calls, fragment_size=3))
    )
    assert [i for i in items if i.startswith(("prep", "call"))] == [
        entry
        for n in range(3)
        for entry in (
            f"prep toolu_{n} read_file",
            f'call toolu_{n} read_file {{"path": "f{n}.txt"}}',
        )
    ]


def test_replayed_opener_for_open_block_prepares_once_and_keeps_arguments() -> None:
    opener = tool_start(0, {"id": "toolu_r", "name": "glob", "input": {}})
    out = feed_all(
        AnthropicStreamAdapter(),
        [
            START,
            opener,
            json_delta(0, '{"pattern":'),
            opener,
            json_delta(0, ' "*.py"}'),
            block_stop(0),
            STOP_DELTA,
            {"type": "message_stop"},
        ],
    )
    assert [i for i in flat(out) if i.startswith(("prep", "call"))] == [
        "prep toolu_r glob",
        'call toolu_r glob {"pattern": "*.py"}',
    ]


def test_replayed_whole_block_after_completion_gives_one_call() -> None:
    block = [
        tool_start(0, {"id": "toolu_r", "name": "glob", "input": {}}),
        json_delta(0, '{"pattern": "*"}'),
        block_stop(0),
    ]
    again = [
        tool_start(1, {"id": "toolu_r", "name": "glob", "input": {}}),
        json_delta(1, '{"pattern": "*"}'),
        block_stop(1),
    ]
    out = feed_all(
        AnthropicStreamAdapter(), [START, *block, *again, STOP_DELTA, {"type": "message_stop"}]
    )
    assert [i for i in flat(out) if i.startswith(("prep", "call"))] == [
        "prep toolu_r glob",
        'call toolu_r glob {"pattern": "*"}',
    ]


def test_same_id_opened_at_another_index_while_open_is_ignored() -> None:
    events: list[dict[str, Any]] = [
        START,
        tool_start(0, {"id": "toolu_d", "name": "glob", "input": {}}),
        tool_start(1, {"id": "toolu_d", "name": "glob", "input": {}}),
        json_delta(0, '{"pattern": "a"}'),
        json_delta(1, '{"pattern": "b"}'),
        block_stop(1),
        block_stop(0),
    ]
    assert [
        i
        for i in flat(feed_all(AnthropicStreamAdapter(), events))
        if i.startswith(("prep", "call"))
    ] == [
        "prep toolu_d glob",
        'call toolu_d glob {"pattern": "a"}',
    ]


def test_input_in_opener_is_used_when_no_deltas_arrive() -> None:
    out = feed_all(
        AnthropicStreamAdapter(),
        [
            START,
            tool_start(0, {"id": "toolu_i", "name": "glob", "input": {"pattern": "*.md"}}),
            block_stop(0),
        ],
    )
    assert flat(out)[-1] == 'call toolu_i glob {"pattern": "*.md"}'


def test_empty_arguments_parse_as_empty_object() -> None:
    out = feed_all(
        AnthropicStreamAdapter(),
        [
            START,
            tool_start(0, {"id": "toolu_e", "name": "todo_read", "input": {}}),
            json_delta(0, ""),
            block_stop(0),
        ],
    )
    assert flat(out)[-1] == "call toolu_e todo_read {}"


@pytest.mark.parametrize("text", ['{"a": ', "[1, 2]", '"str"', "{'a': 1}"])
def test_arguments_that_are_not_a_json_object_fail_the_attempt(text: str) -> None:
    """No call at the block's stop; the stop reason (not the token limit) fails the attempt."""
    adapter = AnthropicStreamAdapter()
    out = feed_all(
        adapter,
        [
            START,
            tool_start(0, {"id": "toolu_b", "name": "glob", "input": {}}),
            json_delta(0, text),
            block_stop(0),
        ],
    )
    assert [c for c in out if c.function_calls] == []
    with pytest.raises(StreamError) as caught:
        adapter.feed("message_delta", json.dumps(STOP_DELTA))
    assert (caught.value.kind, caught.value.retryable) == ("malformed", True)
    assert "toolu_b" in caught.value.message


@pytest.mark.parametrize("stop_reason", ["max_tokens", "model_context_window_exceeded"])
@pytest.mark.parametrize("text", ['{"path": "a.py", "content": "def f(', '{"path": "a.py", "con'])
def test_input_cut_by_the_token_limit_is_dropped_not_an_error(text: str, stop_reason: str) -> None:
    """Eager input streaming: the API sends input unchecked, so max_tokens can end it mid-value."""
    adapter = AnthropicStreamAdapter()
    out = feed_all(
        adapter,
        [
            START,
            tool_start(0, {"id": "toolu_cut", "name": "write_file", "input": {}}),
            json_delta(0, text),
            block_stop(0),
            {"type": "message_delta", "delta": {"stop_reason": stop_reason}, "usage": {}},
            {"type": "message_stop"},
        ],
    )
    out += adapter.end()
    assert flat(out) == ["prep toolu_cut write_file", "finish MAX_TOKENS", "usage 5/1"]


def test_a_block_after_unparsable_input_fails_at_once() -> None:
    """More content after it means the input was finished, not cut: no second card is shown."""
    adapter = AnthropicStreamAdapter()
    feed_all(
        adapter,
        [
            START,
            tool_start(0, {"id": "toolu_b", "name": "glob", "input": {}}),
            json_delta(0, '{"a": '),
            block_stop(0),
        ],
    )
    with pytest.raises(StreamError) as caught:
        adapter.feed(
            "content_block_start",
            json.dumps(tool_start(1, {"id": "toolu_c", "name": "glob", "input": {}})),
        )
    assert (caught.value.kind, caught.value.retryable) == ("malformed", True)
    assert "toolu_b" in caught.value.message


def test_unparsable_input_with_no_stop_reason_fails_at_message_stop() -> None:
    adapter = AnthropicStreamAdapter()
    feed_all(
        adapter,
        [
            START,
            tool_start(0, {"id": "toolu_b", "name": "glob", "input": {}}),
            json_delta(0, '{"a": '),
            block_stop(0),
        ],
    )
    with pytest.raises(StreamError) as caught:
        adapter.feed("message_stop", json.dumps({"type": "message_stop"}))
    assert caught.value.kind == "malformed"
    assert not adapter.finished


def test_non_string_argument_fragment_fails_the_attempt() -> None:
    adapter = AnthropicStreamAdapter()
    feed_all(
        adapter,
        [START, tool_start(0, {"id": "toolu_n", "name": "glob", "input": {}}), json_delta(0, "{")],
    )
    adapter.feed(
        "content_block_delta",
        json.dumps(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": 5},
            }
        ),
    )
    with pytest.raises(StreamError) as caught:
        adapter.feed("content_block_stop", json.dumps(block_stop(0)))
    assert (caught.value.kind, caught.value.retryable) == ("malformed", True)


def test_interleaved_adapters_never_mix_state() -> None:
    one = anthropic_sse(
        tool_calls=[("toolu_A", "read_file", {"path": "one"})], message_id="m1", fragment_size=2
    )
    two = anthropic_sse(
        tool_calls=[("toolu_B", "write_file", {"path": "two", "content": "x"})],
        message_id="m2",
        fragment_size=3,
    )
    events_one, events_two = decode_sse(one), decode_sse(two)
    a, b = AnthropicStreamAdapter(), AnthropicStreamAdapter()
    out_a: list[GenerateContentResponse] = []
    out_b: list[GenerateContentResponse] = []
    for n in range(max(len(events_one), len(events_two))):
        if n < len(events_one):
            out_a += a.feed(*events_one[n])
        if n < len(events_two):
            out_b += b.feed(*events_two[n])
    out_a += a.end()
    out_b += b.end()
    assert summarize_all(out_a) == summarize_all(run_adapter(AnthropicStreamAdapter(), one))
    assert summarize_all(out_b) == summarize_all(run_adapter(AnthropicStreamAdapter(), two))
    assert 'call toolu_A read_file {"path": "one"}' in flat(out_a)
    assert not any("toolu_A" in item for item in flat(out_b))


def test_preparations_never_reach_serialised_output() -> None:
    chunks = run_adapter(
        AnthropicStreamAdapter(),
        anthropic_sse(text="t", tool_calls=[("toolu_S", "search", {"pattern": "x"})]),
    )
    prepared = [c for c in chunks if get_preparations(c)]
    assert len(prepared) == 1
    assert response_to_dict(prepared[0]) == {
        "candidates": [{"content": {"role": "model", "parts": []}}],
        "responseId": "msg_fake_1",
        "modelVersion": "claude-fake",
    }
    dumped = orjson.dumps([response_to_dict(c) for c in chunks]).decode()
    assert "prepar" not in dumped.lower()
    assert dumped.count("toolu_S") == 1  # only inside the complete functionCall


def test_text_thinking_signature_and_redacted_thinking() -> None:
    events: list[dict[str, Any]] = [
        START,
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": ""},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "hmm"},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": "SIG"},
        },
        block_stop(0),
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "redacted_thinking", "data": "ENC"},
        },
        block_stop(1),
        {"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}},
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "text_delta", "text": "answer"},
        },
        block_stop(2),
    ]
    assert flat(feed_all(AnthropicStreamAdapter(), events)) == [
        "thought hmm",
        "thought  sig=SIG",
        f"thought  sig={REDACTED_THINKING_PREFIX}ENC",
        "text answer",
    ]


def test_unknown_types_and_ping_are_ignored() -> None:
    events: list[dict[str, Any]] = [
        START,
        {"type": "ping"},
        {"type": "brand_new_event", "stuff": [1, 2]},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {
                "type": "server_tool_use",
                "id": "srv_1",
                "name": "web_search",
                "input": {},
            },
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "citations_delta", "citation": {}},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": "{"},
        },
        block_stop(0),
        {"type": "content_block_delta", "index": 5, "delta": "not-an-object"},
    ]
    assert feed_all(AnthropicStreamAdapter(), events) == []


def test_dispatch_uses_the_json_type_not_the_event_name() -> None:
    adapter = AnthropicStreamAdapter()
    adapter.feed("message_start", json.dumps(START))
    out = adapter.feed(
        "ping",
        json.dumps(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "x"},
            }
        ),
    )
    assert flat(out) == ["text x"]


@pytest.mark.parametrize(
    ("stop_reason", "expected"),
    [
        ("end_turn", FinishReason.STOP),
        ("stop_sequence", FinishReason.STOP),
        ("tool_use", FinishReason.STOP),
        ("max_tokens", FinishReason.MAX_TOKENS),
        ("refusal", FinishReason.REFUSAL),
        ("pause_turn", FinishReason.OTHER),
        ("something_new", FinishReason.OTHER),
    ],
)
def test_stop_reasons(stop_reason: str, expected: FinishReason) -> None:
    chunks = run_adapter(AnthropicStreamAdapter(), anthropic_sse(text="x", stop_reason=stop_reason))
    assert chunks[-1].finish_reason is expected
    assert [c.finish_reason for c in chunks[:-1]] == [None] * (len(chunks) - 1)


def test_usage_counts_cached_input_and_cumulative_delta() -> None:
    start = {
        "type": "message_start",
        "message": {
            "id": "m",
            "model": "x",
            "usage": {
                "input_tokens": 10,
                "cache_creation_input_tokens": 5,
                "cache_read_input_tokens": 100,
                "output_tokens": 1,
            },
        },
    }
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn"},
        "usage": {"output_tokens": 42},
    }
    out = feed_all(AnthropicStreamAdapter(), [start, delta])
    assert flat(out) == ["finish STOP", "usage 115/42"]


def test_no_usage_reported_when_the_stream_gives_none() -> None:
    out = feed_all(
        AnthropicStreamAdapter(),
        [
            {"type": "message_start", "message": {"id": "m"}},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}},
        ],
    )
    assert out[-1].usage is None


@pytest.mark.parametrize(
    ("error_type", "retryable", "kind"),
    [
        ("overloaded_error", True, "overloaded"),
        ("rate_limit_error", True, "rate_limit"),
        ("api_error", True, "server"),
        ("invalid_request_error", False, "invalid_request"),
        ("authentication_error", False, "auth"),
        ("mystery_error", False, "provider"),
    ],
)
def test_in_band_error_event(error_type: str, retryable: bool, kind: str) -> None:
    adapter = AnthropicStreamAdapter()
    adapter.feed("message_start", json.dumps(START))
    with pytest.raises(StreamError) as caught:
        adapter.feed(
            "error",
            json.dumps({"type": "error", "error": {"type": error_type, "message": "said so"}}),
        )
    assert (caught.value.retryable, caught.value.kind, caught.value.message) == (
        retryable,
        kind,
        "said so",
    )


def test_error_event_name_with_unexpected_payload_still_fails() -> None:
    with pytest.raises(StreamError) as caught:
        AnthropicStreamAdapter().feed("error", json.dumps({"error": {"type": "overloaded_error"}}))
    assert caught.value.retryable


@pytest.mark.parametrize("data", ["{not json", "", "[1,2]", "3"])
def test_malformed_data_line(data: str) -> None:
    with pytest.raises(StreamError) as caught:
        AnthropicStreamAdapter().feed("content_block_delta", data)
    assert (caught.value.kind, caught.value.retryable) == ("malformed", True)
    assert "Anthropic stream" in caught.value.message


def test_second_message_start_is_a_protocol_error() -> None:
    adapter = AnthropicStreamAdapter()
    adapter.feed("message_start", json.dumps(START))
    with pytest.raises(StreamError) as caught:
        adapter.feed("message_start", json.dumps(START))
    assert (caught.value.kind, caught.value.retryable) == ("protocol", True)


def test_end_without_message_stop_is_truncated() -> None:
    adapter = AnthropicStreamAdapter()
    for event, data in decode_sse(anthropic_sse(text="partial", terminal=False)):
        adapter.feed(event, data)
    with pytest.raises(StreamError) as caught:
        adapter.end()
    assert (caught.value.kind, caught.value.retryable) == ("truncated", True)


def test_end_after_message_stop_is_clean() -> None:
    adapter = AnthropicStreamAdapter()
    feed_all(adapter, [START, STOP_DELTA, {"type": "message_stop"}])
    assert adapter.finished
    assert adapter.end() == []


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=120, deadline=None)
@given(
    args=st.dictionaries(st.text(max_size=8), json_values, max_size=5),
    cuts=st.lists(st.integers(0, 500)),
)
def test_any_fragmentation_of_the_arguments_gives_the_same_call(
    args: dict[str, Any], cuts: list[int]
) -> None:
    text = json.dumps(args)
    points = sorted({c % (len(text) + 1) for c in cuts})
    fragments = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    events: list[dict[str, Any]] = [
        START,
        tool_start(0, {"id": "toolu_h", "name": "write_file", "input": {}}),
        json_delta(0, ""),
    ]
    events += [json_delta(0, f) for f in fragments]
    events += [block_stop(0), STOP_DELTA, {"type": "message_stop"}]
    adapter = AnthropicStreamAdapter()
    out = feed_all(adapter, events) + adapter.end()
    calls = [fc for c in out for fc in c.function_calls]
    assert len(calls) == 1
    assert calls[0].args == args
    assert [summarize(c) for c in out if get_preparations(c)] == [("prep toolu_h write_file",)]
