"""OpenAIStreamAdapter: the stream-local tool-call parser and the OpenAI-compatible deviations."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.providers.helpers import flat, run_adapter, summarize, summarize_all
from toolprep.messages.content import FinishReason, GenerateContentResponse, response_to_dict
from toolprep.messages.preparation import get_preparations
from toolprep.runtime.providers.base import StreamError
from toolprep.runtime.providers.openai_adapter import OpenAIStreamAdapter
from toolprep.runtime.providers.sse import decode_sse
from toolprep.testing import openai_sse

_MISSING = object()


def item(
    index: Any = _MISSING, id: Any = _MISSING, name: Any = _MISSING, args: Any = _MISSING
) -> dict[str, Any]:
    """One ``delta.tool_calls`` entry; fields left out are absent from the JSON."""
    out: dict[str, Any] = {}
    if index is not _MISSING:
        out["index"] = index
    if id is not _MISSING:
        out["id"] = id
        out["type"] = "function"
    function: dict[str, Any] = {}
    if name is not _MISSING:
        function["name"] = name
    if args is not _MISSING:
        function["arguments"] = args
    if function:
        out["function"] = function
    return out


def chunk(
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    *,
    usage: dict[str, int] | None = None,
    no_choices: bool = False,
) -> str:
    body: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-x"}
    body["choices"] = (
        [] if no_choices else [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    )
    if usage is not None:
        body["usage"] = usage
    return json.dumps(body)


def calls(*items: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": list(items)}


def feed_all(adapter: OpenAIStreamAdapter, lines: Iterable[str]) -> list[GenerateContentResponse]:
    out: list[GenerateContentResponse] = []
    for line in lines:
        out += adapter.feed(None, line)
    return out


def per_event(adapter: OpenAIStreamAdapter, lines: Iterable[str]) -> list[list[tuple[str, ...]]]:
    """The summary of what each event produced, so tests can say *which* event prepared."""
    return [summarize_all(adapter.feed(None, line)) for line in lines]


def test_preparation_on_the_introducing_event_and_calls_only_at_finish() -> None:
    adapter = OpenAIStreamAdapter()
    produced = per_event(
        adapter,
        [
            chunk({"role": "assistant", "content": "Let me look. "}),
            chunk({"content": "One sec.", **calls(item(0, "call_1", "read_file", ""))}),
            chunk(calls(item(0, args='{"path"'))),
            chunk(calls(item(0, args=': "x"}'))),
            chunk(finish="tool_calls"),
            "[DONE]",
        ],
    )
    assert produced == [
        [("text Let me look. ",)],
        [("prep call_1 read_file", "text One sec.")],
        [],
        [],
        [('call call_1 read_file {"path": "x"}', "finish STOP")],
        [],
    ]
    assert adapter.end() == []


def test_id_and_name_repeated_on_every_fragment_prepare_once() -> None:
    out = feed_all(
        OpenAIStreamAdapter(),
        [
            chunk(calls(item(0, "call_r", "get_weather", ""))),
            chunk(calls(item(0, "call_r", "get_weather", '{"city":'))),
            chunk(calls(item(0, "call_r", "get_weather", ' "Oslo"}'))),
            chunk(finish="tool_calls"),
        ],
    )
    assert [i for i in flat(out) if i.startswith(("prep", "call"))] == [
        "prep call_r get_weather",
        'call call_r get_weather {"city": "Oslo"}',
    ]


def test_empty_id_and_name_on_continuations_are_ignored() -> None:
    out = feed_all(
        OpenAIStreamAdapter(),
        [
            chunk(calls(item(0, "call_e", "glob", ""))),
            chunk(calls(item(0, "", "", '{"pattern": "*"}'))),
            chunk(finish="tool_calls"),
        ],
    )
    assert flat(out) == ["prep call_e glob", 'call call_e glob {"pattern": "*"}', "finish STOP"]


def test_name_split_across_fragments_is_appended() -> None:
    produced = per_event(
        OpenAIStreamAdapter(["get_weather"]),
        [
            chunk(calls(item(0, "call_s", "get_", ""))),
            chunk(calls(item(0, name="weather"))),
            chunk(calls(item(0, args='{"city": "Rome"}'))),
            chunk(finish="tool_calls"),
        ],
    )
    assert produced == [
        [],
        [("prep call_s get_weather",)],
        [],
        [('call call_s get_weather {"city": "Rome"}', "finish STOP")],
    ]


def test_split_name_without_declared_tools_prepares_early_but_calls_with_full_name() -> None:
    out = feed_all(
        OpenAIStreamAdapter(),
        [
            chunk(calls(item(0, "call_s", "get_", ""))),
            chunk(calls(item(0, name="weather", args="{}"))),
            chunk(finish="tool_calls"),
        ],
    )
    assert flat(out) == ["prep call_s get_", "call call_s get_weather {}", "finish STOP"]


def test_cumulative_name_resend_replaces_instead_of_appending() -> None:
    out = feed_all(
        OpenAIStreamAdapter(["get_weather"]),
        [
            chunk(calls(item(0, "call_c", "get_w"))),
            chunk(calls(item(0, name="get_weather", args="{}"))),
            chunk(finish="tool_calls"),
        ],
    )
    assert flat(out) == ["prep call_c get_weather", "call call_c get_weather {}", "finish STOP"]


def test_name_halves_that_are_identical_use_declared_names() -> None:
    out = feed_all(
        OpenAIStreamAdapter(["abab"]),
        [
            chunk(calls(item(0, "call_d", "ab"))),
            chunk(calls(item(0, name="ab"))),
            chunk(calls(item(0, args="{}"))),
            chunk(finish="tool_calls"),
        ],
    )
    assert flat(out) == ["prep call_d abab", "call call_d abab {}", "finish STOP"]


def test_declared_name_that_another_extends_waits_for_arguments() -> None:
    produced = per_event(
        OpenAIStreamAdapter(["read", "read_file"]),
        [
            chunk(calls(item(0, "call_p", "read", ""))),
            chunk(calls(item(0, name="_file"))),
            chunk(calls(item(0, args='{"path": "a"}'))),
            chunk(finish="tool_calls"),
        ],
    )
    assert produced == [
        [],
        [("prep call_p read_file",)],
        [],
        [('call call_p read_file {"path": "a"}', "finish STOP")],
    ]


def test_undeclared_name_is_prepared_once_arguments_start() -> None:
    produced = per_event(
        OpenAIStreamAdapter(["read_file"]),
        [
            chunk(calls(item(0, "call_u", "mystery", ""))),
            chunk(calls(item(0, args="{}"))),
            chunk(finish="tool_calls"),
        ],
    )
    assert produced == [[], [("prep call_u mystery",)], [("call call_u mystery {}", "finish STOP")]]


def test_whole_call_in_one_chunk_with_finish() -> None:
    out = feed_all(
        OpenAIStreamAdapter(),
        [chunk(calls(item(0, "call_w", "glob", '{"pattern": "*.py"}')), "tool_calls")],
    )
    assert summarize_all(out) == [
        ("prep call_w glob", 'call call_w glob {"pattern": "*.py"}', "finish STOP")
    ]


def test_missing_index_parallel_calls_are_told_apart_by_id() -> None:
    out = feed_all(
        OpenAIStreamAdapter(),
        [
            chunk(
                calls(
                    item(id="fc-1", name="read_file", args='{"path": "a"}'),
                    item(id="fc-2", name="read_file", args='{"path": "b"}'),
                )
            ),
            chunk({"role": "assistant"}, "stop"),
        ],
    )
    assert flat(out) == [
        "prep fc-1 read_file",
        "prep fc-2 read_file",
        'call fc-1 read_file {"path": "a"}',
        'call fc-2 read_file {"path": "b"}',
        "finish STOP",
    ]


def test_missing_index_continuation_goes_to_the_latest_call() -> None:
    out = feed_all(
        OpenAIStreamAdapter(),
        [
            chunk(calls(item(id="fc-1", name="glob", args='{"pat'))),
            chunk(calls(item(args='tern": "*"}'))),
            chunk(finish="tool_calls"),
        ],
    )
    assert flat(out)[-2:] == ['call fc-1 glob {"pattern": "*"}', "finish STOP"]


def test_index_reused_by_a_parallel_call_with_a_different_id() -> None:
    out = feed_all(
        OpenAIStreamAdapter(),
        [
            chunk(calls(item(0, "call_a", "read_file", ""))),
            chunk(calls(item(0, args='{"path": "a"}'))),
            chunk(calls(item(0, "call_b", "read_file", ""))),
            chunk(calls(item(0, args='{"path": "b"}'))),
            chunk(finish="tool_calls"),
        ],
    )
    assert flat(out) == [
        "prep call_a read_file",
        "prep call_b read_file",
        'call call_a read_file {"path": "a"}',
        'call call_b read_file {"path": "b"}',
        "finish STOP",
    ]


def test_two_entries_with_one_index_in_one_chunk() -> None:
    out = feed_all(
        OpenAIStreamAdapter(),
        [
            chunk(
                calls(
                    item(0, "call_a", "glob", '{"pattern": "a"}'),
                    item(0, "call_b", "glob", '{"pattern": "b"}'),
                )
            ),
            chunk(finish="tool_calls"),
        ],
    )
    assert summarize_all(out) == [
        ("prep call_a glob", "prep call_b glob"),
        ('call call_a glob {"pattern": "a"}', 'call call_b glob {"pattern": "b"}', "finish STOP"),
    ]


def test_calls_complete_in_tool_index_order() -> None:
    out = feed_all(
        OpenAIStreamAdapter(),
        [
            chunk(calls(item(1, "call_1", "glob", '{"pattern": "1"}'))),
            chunk(calls(item(0, "call_0", "glob", '{"pattern": "0"}'))),
            chunk(finish="tool_calls"),
        ],
    )
    assert [i for i in flat(out) if i.startswith("call")] == [
        'call call_0 glob {"pattern": "0"}',
        'call call_1 glob {"pattern": "1"}',
    ]


def test_id_arriving_after_the_name_prepares_when_both_are_known() -> None:
    produced = per_event(
        OpenAIStreamAdapter(),
        [
            chunk(calls(item(0, name="search", args=""))),
            chunk(calls(item(0, args='{"pattern":'))),
            chunk(calls(item(0, id="call_late"))),
            chunk(calls(item(0, args=' "x"}'))),
            chunk(finish="tool_calls"),
        ],
    )
    assert produced == [
        [],
        [],
        [("prep call_late search",)],
        [],
        [('call call_late search {"pattern": "x"}', "finish STOP")],
    ]


def test_call_that_never_gets_an_id_is_not_prepared_and_gets_a_generated_id() -> None:
    out = feed_all(
        OpenAIStreamAdapter(),
        [chunk(calls(item(0, name="glob", args="{}"))), chunk(finish="tool_calls")],
    )
    assert flat(out) == ["call call_gen_1 glob {}", "finish STOP"]


def test_same_id_at_another_index_is_a_distinct_call() -> None:
    out = feed_all(
        OpenAIStreamAdapter(),
        [
            chunk(calls(item(0, "call_x", "glob", '{"pattern": "p"}'))),
            chunk(calls(item(3, "call_x", "glob", '{"pattern": "q"}'))),
            chunk(finish="tool_calls"),
        ],
    )
    assert flat(out) == [
        "prep call_x glob",
        "prep call_x_2 glob",
        'call call_x glob {"pattern": "p"}',
        'call call_x_2 glob {"pattern": "q"}',
        "finish STOP",
    ]


def test_stop_instead_of_tool_calls_still_emits_the_calls() -> None:
    out = feed_all(
        OpenAIStreamAdapter(), [chunk(calls(item(0, "call_1", "glob", "{}"))), chunk(finish="stop")]
    )
    assert flat(out)[-2:] == ["call call_1 glob {}", "finish STOP"]


def test_arguments_sent_as_an_object() -> None:
    out = feed_all(
        OpenAIStreamAdapter(),
        [chunk(calls(item(0, "call_o", "glob", {"pattern": "*"})), "tool_calls")],
    )
    assert flat(out)[-2:] == ['call call_o glob {"pattern": "*"}', "finish STOP"]


@pytest.mark.parametrize(
    ("finish", "expected"),
    [
        ("stop", FinishReason.STOP),
        ("tool_calls", FinishReason.STOP),
        ("length", FinishReason.MAX_TOKENS),
        ("content_filter", FinishReason.REFUSAL),
        ("weird", FinishReason.OTHER),
    ],
)
def test_finish_reasons(finish: str, expected: FinishReason) -> None:
    chunks = run_adapter(OpenAIStreamAdapter(), openai_sse(text="hi", finish_reason=finish))
    assert [c.finish_reason for c in chunks if c.finish_reason] == [expected]


def test_refusal_text_is_shown_and_finishes_as_refusal() -> None:
    out = feed_all(
        OpenAIStreamAdapter(), [chunk({"refusal": "I can't help with that."}), chunk(finish="stop")]
    )
    assert flat(out) == ["text I can't help with that.", "finish REFUSAL"]


def test_reasoning_fields_become_thoughts() -> None:
    out = feed_all(
        OpenAIStreamAdapter(),
        [
            chunk({"reasoning_content": "think"}),
            chunk({"reasoning": "more"}),
            chunk({"content": "done"}),
            chunk(finish="stop"),
        ],
    )
    assert flat(out) == ["thought think", "thought more", "text done", "finish STOP"]


def test_usage_on_the_finish_chunk() -> None:
    out = feed_all(
        OpenAIStreamAdapter(),
        [
            chunk({"content": "x"}),
            chunk(finish="stop", usage={"prompt_tokens": 3, "completion_tokens": 4}),
        ],
    )
    assert summarize_all(out)[-1] == ("finish STOP", "usage 3/4")


def test_usage_in_a_trailing_choices_less_chunk() -> None:
    out = feed_all(
        OpenAIStreamAdapter(),
        [
            chunk({"content": "x"}),
            chunk(finish="stop"),
            chunk(no_choices=True, usage={"prompt_tokens": 7, "completion_tokens": 8}),
            "[DONE]",
        ],
    )
    assert summarize_all(out) == [("text x",), ("finish STOP",), ("usage 7/8",)]


def test_usage_before_the_finish_is_held_for_the_finish_chunk() -> None:
    out = feed_all(
        OpenAIStreamAdapter(),
        [
            chunk({"content": "x"}, usage={"prompt_tokens": 1, "completion_tokens": 1}),
            chunk(finish="stop"),
        ],
    )
    assert summarize_all(out) == [("text x",), ("finish STOP", "usage 1/1")]


def test_truncated_arguments_are_repaired_and_marked_max_tokens() -> None:
    out = feed_all(
        OpenAIStreamAdapter(),
        [
            chunk(calls(item(0, "call_t", "write_file", '{"path": "a.txt", "content": "hel'))),
            chunk(finish="length"),
        ],
    )
    assert flat(out) == [
        "prep call_t write_file",
        'call call_t write_file {"content": "hel", "path": "a.txt"}',
        "finish MAX_TOKENS",
    ]


def test_cut_arguments_are_repaired_only_under_the_servers_own_length_stop() -> None:
    cut = '{"pattern": ["a", "b"'
    out = feed_all(
        OpenAIStreamAdapter(),
        [chunk(calls(item(0, "call_t", "glob", cut))), chunk(finish="length")],
    )
    assert flat(out)[-2:] == ['call call_t glob {"pattern": ["a", "b"]}', "finish MAX_TOKENS"]


@pytest.mark.parametrize("reason", ["tool_calls", "stop"])
def test_cut_arguments_under_another_finish_reason_fail_the_attempt(reason: str) -> None:
    """Never a guessed reading run as a call, never a ``max_tokens`` the server did not say."""
    adapter = OpenAIStreamAdapter()
    adapter.feed(None, chunk(calls(item(0, "call_t", "glob", '{"pattern": ["a", "b"'))))
    with pytest.raises(StreamError) as caught:
        adapter.feed(None, chunk(finish=reason))
    assert (caught.value.kind, caught.value.retryable) == ("malformed", True)
    assert f"finish_reason {reason!r}" in caught.value.message


@pytest.mark.parametrize(
    "args", ['{"path":', '{"pa', '{"a": tru', "[1, 2]", '{"a": 1} trailing', "nope"]
)
def test_unrepairable_arguments_fail_the_attempt(args: str) -> None:
    adapter = OpenAIStreamAdapter()
    adapter.feed(None, chunk(calls(item(0, "call_bad", "glob", args))))
    with pytest.raises(StreamError) as caught:
        adapter.feed(None, chunk(finish="tool_calls"))
    assert (caught.value.kind, caught.value.retryable) == ("malformed", True)
    assert "call_bad" in caught.value.message


@pytest.mark.parametrize(
    ("error", "retryable", "kind", "status"),
    [
        ({"message": "m", "type": "server_error"}, True, "server", None),
        (
            {"message": "m", "type": "requests", "code": "rate_limit_exceeded"},
            True,
            "rate_limit",
            None,
        ),
        ({"message": "m", "type": "overloaded_error"}, True, "overloaded", None),
        (
            {"message": "m", "type": "insufficient_quota", "code": "insufficient_quota"},
            False,
            "billing",
            None,
        ),
        ({"message": "m", "type": "invalid_request_error"}, False, "invalid_request", None),
        ({"message": "m", "code": 503}, True, "server", 503),
        ({"message": "m", "code": 400}, False, "invalid_request", 400),
        ({"message": "m"}, False, "provider", None),
    ],
)
def test_in_band_errors(
    error: dict[str, Any], retryable: bool, kind: str, status: int | None
) -> None:
    adapter = OpenAIStreamAdapter()
    adapter.feed(None, chunk(calls(item(0, "call_1", "glob", ""))))
    with pytest.raises(StreamError) as caught:
        adapter.feed(None, json.dumps({"error": error}))
    assert (
        caught.value.message,
        caught.value.retryable,
        caught.value.kind,
        caught.value.status,
    ) == ("m", retryable, kind, status)


def test_error_as_a_bare_string() -> None:
    with pytest.raises(StreamError) as caught:
        OpenAIStreamAdapter().feed(None, json.dumps({"error": "upstream exploded"}))
    assert caught.value.message == "upstream exploded"


@pytest.mark.parametrize("data", ["{oops", '{"choices": [', "[]", "null"])
def test_malformed_data_line(data: str) -> None:
    with pytest.raises(StreamError) as caught:
        OpenAIStreamAdapter().feed(None, data)
    assert (caught.value.kind, caught.value.retryable) == ("malformed", True)
    assert "OpenAI stream" in caught.value.message


def test_end_without_finish_or_done_is_truncated() -> None:
    adapter = OpenAIStreamAdapter()
    feed_all(
        adapter, [chunk({"content": "partial"}), chunk(calls(item(0, "call_1", "glob", "{}")))]
    )
    with pytest.raises(StreamError) as caught:
        adapter.end()
    assert (caught.value.kind, caught.value.retryable) == ("truncated", True)


def test_finish_without_done_ends_normally() -> None:
    adapter = OpenAIStreamAdapter()
    out = feed_all(adapter, [chunk({"content": "x"}), chunk(finish="stop")])
    assert adapter.end() == []
    assert out[-1].finish_reason is FinishReason.STOP


def test_done_without_finish_completes_the_calls() -> None:
    adapter = OpenAIStreamAdapter()
    out = feed_all(adapter, [chunk(calls(item(0, "call_1", "glob", "{}"))), "[DONE]"])
    assert flat(out) == ["prep call_1 glob", "call call_1 glob {}", "finish STOP"]
    assert adapter.end() == []


def test_events_after_the_finish_add_no_calls() -> None:
    out = feed_all(
        OpenAIStreamAdapter(),
        [
            chunk(calls(item(0, "call_1", "glob", "{}"))),
            chunk(finish="tool_calls"),
            chunk(calls(item(1, "call_2", "glob", "{}"))),
            chunk(finish="tool_calls"),
            "[DONE]",
        ],
    )
    assert [i for i in flat(out) if i.startswith(("prep", "call"))] == [
        "prep call_1 glob",
        "call call_1 glob {}",
    ]


def test_other_choices_are_ignored() -> None:
    other = json.dumps(
        {
            "id": "c",
            "choices": [
                {
                    "index": 1,
                    "delta": {"content": "B", **calls(item(0, "call_other", "glob", "{}"))},
                    "finish_reason": "stop",
                }
            ],
        }
    )
    out = feed_all(OpenAIStreamAdapter(), [chunk({"content": "A"}), other, chunk(finish="stop")])
    assert flat(out) == ["text A", "finish STOP"]


def test_gemini_thought_signature_travels_with_its_call() -> None:
    entry = {
        **item(id="fc-1", name="glob", args="{}"),
        "extra_content": {"google": {"thought_signature": "SIG"}},
    }
    out = feed_all(OpenAIStreamAdapter(), [chunk(calls(entry)), chunk(finish="stop")])
    assert flat(out) == ["prep fc-1 glob", "thought  sig=SIG", "call fc-1 glob {}", "finish STOP"]


def test_preparations_never_reach_serialised_output() -> None:
    chunks = run_adapter(
        OpenAIStreamAdapter(), openai_sse(text="t", tool_calls=[("call_S", "search", {"q": 1})])
    )
    assert sum(1 for c in chunks if get_preparations(c)) == 1
    dumped = orjson.dumps([response_to_dict(c) for c in chunks]).decode()
    assert "prepar" not in dumped.lower()
    assert dumped.count("call_S") == 1


def test_interleaved_adapters_never_mix_state() -> None:
    one = decode_sse(
        openai_sse(tool_calls=[("call_A", "read_file", {"path": "one"})], fragment_size=2)
    )
    two = decode_sse(
        openai_sse(tool_calls=[("call_B", "glob", {"pattern": "two"})], fragment_size=3)
    )
    a, b = OpenAIStreamAdapter(), OpenAIStreamAdapter()
    out_a: list[GenerateContentResponse] = []
    out_b: list[GenerateContentResponse] = []
    for n in range(max(len(one), len(two))):
        if n < len(one):
            out_a += a.feed(*one[n])
        if n < len(two):
            out_b += b.feed(*two[n])
    assert [i for i in flat(out_a) if i.startswith(("prep", "call"))] == [
        "prep call_A read_file",
        'call call_A read_file {"path": "one"}',
    ]
    assert [i for i in flat(out_b) if i.startswith(("prep", "call"))] == [
        "prep call_B glob",
        'call call_B glob {"pattern": "two"}',
    ]


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
    repeat_identity=st.booleans(),
)
def test_any_fragmentation_of_the_arguments_gives_the_same_call(
    args: dict[str, Any], cuts: list[int], repeat_identity: bool
) -> None:
    text = json.dumps(args)
    points = sorted({c % (len(text) + 1) for c in cuts})
    fragments = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    lines = [chunk(calls(item(0, "call_h", "write_file", "")))]
    for fragment in fragments:
        entry = (
            item(0, "call_h", "write_file", fragment) if repeat_identity else item(0, args=fragment)
        )
        lines.append(chunk(calls(entry)))
    lines += [chunk(finish="tool_calls"), "[DONE]"]
    adapter = OpenAIStreamAdapter(["write_file"])
    out = feed_all(adapter, lines) + adapter.end()
    found = [fc for c in out for fc in c.function_calls]
    assert len(found) == 1
    assert (found[0].id, found[0].name, found[0].args) == ("call_h", "write_file", args)
    assert [summarize(c) for c in out if get_preparations(c)] == [("prep call_h write_file",)]
