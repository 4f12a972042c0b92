"""Parallel OpenAI tool calls that share one id stay separate calls, each under its own id."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.providers.helpers import flat
from tests.providers.test_openai_adapter import calls, chunk, feed_all, item
from tests.runtime import scenarios as sc
from tests.support.runtime_harness import check_cards, harness, lifecycle, tool_frames
from toolprep.messages.content import FunctionCallPart
from toolprep.runtime.providers.openai_adapter import OpenAIStreamAdapter
from toolprep.testing import ScriptedResponse, split_sse_events

WEATHER = '{"city": "Paris"}'
README = '{"path": "README.md"}'


def test_two_calls_with_one_id_are_two_calls_under_distinct_ids() -> None:
    out = feed_all(
        OpenAIStreamAdapter(["get_weather", "read_file"]),
        [
            chunk(calls(item(0, "call_1", "get_weather", ""))),
            chunk(calls(item(0, args=WEATHER[:9]))),
            chunk(calls(item(0, args=WEATHER[9:]))),
            chunk(calls(item(1, "call_1", "read_file", ""))),
            chunk(calls(item(1, args=README))),
            chunk(finish="tool_calls"),
        ],
    )
    assert flat(out) == [
        "prep call_1 get_weather",
        "prep call_1_2 read_file",
        'call call_1 get_weather {"city": "Paris"}',
        'call call_1_2 read_file {"path": "README.md"}',
        "finish STOP",
    ]


def test_identity_resent_on_every_fragment_still_keeps_the_calls_apart() -> None:
    out = feed_all(
        OpenAIStreamAdapter(),
        [
            chunk(calls(item(0, "dup", "read_file", '{"path": '))),
            chunk(calls(item(1, "dup", "read_file", '{"path": '))),
            chunk(calls(item(0, "dup", "read_file", '"a"}'))),
            chunk(calls(item(1, "dup", "read_file", '"b"}'))),
            chunk(finish="tool_calls"),
        ],
    )
    assert [i for i in flat(out) if i.startswith("call")] == [
        'call dup read_file {"path": "a"}',
        'call dup_2 read_file {"path": "b"}',
    ]


def test_both_calls_in_one_chunk() -> None:
    out = feed_all(
        OpenAIStreamAdapter(),
        [
            chunk(
                calls(
                    item(0, "same", "get_weather", WEATHER),
                    item(1, "same", "read_file", README),
                )
            ),
            chunk(finish="tool_calls"),
        ],
    )
    assert [i for i in flat(out) if i.startswith("call")] == [
        'call same get_weather {"city": "Paris"}',
        'call same_2 read_file {"path": "README.md"}',
    ]


def test_a_derived_id_never_collides_with_an_id_the_server_sent() -> None:
    out = feed_all(
        OpenAIStreamAdapter(),
        [
            chunk(calls(item(0, "c", "glob", '{"pattern": "0"}'))),
            chunk(calls(item(1, "c", "glob", '{"pattern": "1"}'))),
            chunk(calls(item(2, "c_2", "glob", '{"pattern": "2"}'))),
            chunk(calls(item(3, "c", "glob", '{"pattern": "3"}'))),
            chunk(finish="tool_calls"),
        ],
    )
    assert [i for i in flat(out) if i.startswith("call")] == [
        'call c glob {"pattern": "0"}',
        'call c_2 glob {"pattern": "1"}',
        'call c_2_2 glob {"pattern": "2"}',
        'call c_3 glob {"pattern": "3"}',
    ]


def test_id_arriving_late_on_a_second_call_is_still_distinct() -> None:
    out = feed_all(
        OpenAIStreamAdapter(),
        [
            chunk(calls(item(0, "k", "glob", '{"pattern": "a"}'))),
            chunk(calls(item(1, name="search", args=""))),
            chunk(calls(item(1, id="k"))),
            chunk(calls(item(1, args='{"pattern": "b"}'))),
            chunk(finish="tool_calls"),
        ],
    )
    assert [i for i in flat(out) if i.startswith("call")] == [
        'call k glob {"pattern": "a"}',
        'call k_2 search {"pattern": "b"}',
    ]


@settings(max_examples=100, deadline=None)
@given(
    names=st.lists(st.sampled_from(["glob", "read_file", "search"]), min_size=2, max_size=4),
    order=st.randoms(use_true_random=False),
    size=st.integers(1, 12),
)
def test_any_interleaving_of_calls_sharing_an_id(names: list[str], order: Any, size: int) -> None:
    """Whatever the order of their fragments, N calls with one id come out as N calls."""
    streams = []
    for n, name in enumerate(names):
        args = json.dumps({"pattern": str(n)})
        pieces = [args[i : i + size] for i in range(0, len(args), size)]
        streams.append([item(n, "shared", name, ""), *[item(n, "shared", args=p) for p in pieces]])
    lines = []
    while any(streams):
        stream = order.choice([s for s in streams if s])
        lines.append(chunk(calls(stream.pop(0))))
    out = feed_all(OpenAIStreamAdapter(), [*lines, chunk(finish="tool_calls")])
    produced = [
        part.function_call for c in out for part in c.parts if isinstance(part, FunctionCallPart)
    ]
    assert [(f.name, f.args) for f in produced] == [
        (name, {"pattern": str(n)}) for n, name in enumerate(names)
    ]
    assert len({f.id for f in produced}) == len(names)


# --- end to end, through the real openai SDK ----------------------------------------------


def _duplicate_id_turn() -> list[bytes]:
    """A real-shaped stream whose two parallel calls both say ``id: call_1``."""
    transcript = sc.calls_turn(
        "openai",
        [
            ("call_1", "get_weather", {"city": "Paris"}),
            ("call_1", "read_file", {"path": "README.md"}),
        ],
    )
    return split_sse_events(transcript)


def test_both_calls_run_and_the_history_stays_consistent(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("hello from the readme\n")
    with harness("openai", tmp_path) as h:
        h.server.enqueue(
            ScriptedResponse(events=_duplicate_id_turn()), sc.ok(sc.text_turn("openai"))
        )
        sid, sink = h.session()
        assert h.turn(sid, sink).stop_reason == "end_turn"
        check_cards(sink.frames())
        assert lifecycle(sink.frames()) == {
            "call_1": ["preparing", "in_progress", "completed"],
            "call_1_2": ["preparing", "in_progress", "completed"],
        }
        assert h.tool.executed == [("call_1", {"city": "Paris"})]
        titles = {f["toolCallId"]: f["_meta"]["toolName"] for f in tool_frames(sink.frames())}
        assert titles == {"call_1": "get_weather", "call_1_2": "read_file"}
        # What the model sees next: each call answered under its own id, nothing merged.
        messages = h.server.requests[1].body["messages"]
        assistant = next(m for m in messages if m["role"] == "assistant")
        assert [(c["id"], c["function"]["name"]) for c in assistant["tool_calls"]] == [
            ("call_1", "get_weather"),
            ("call_1_2", "read_file"),
        ]
        results = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
        assert set(results) == {"call_1", "call_1_2"}
        assert "Sunny in Paris" in results["call_1"]
        assert "hello from the readme" in results["call_1_2"]
        # The agent serves another session normally afterwards.
        h.server.enqueue(sc.ok(sc.text_turn("openai", "fine")))
        other, other_sink = h.session()
        assert h.turn(other, other_sink).stop_reason == "end_turn"


def test_the_next_turn_reusing_the_same_ids_gets_fresh_ones_again(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("x\n")
    with harness("openai", tmp_path) as h:
        sid, sink = h.session()
        for _ in range(2):
            h.server.enqueue(
                ScriptedResponse(events=_duplicate_id_turn()), sc.ok(sc.text_turn("openai"))
            )
            assert h.turn(sid, sink).stop_reason == "end_turn"
        check_cards(sink.frames())
        assert list(lifecycle(sink.frames())) == ["call_1", "call_1_2", "call_1_3", "call_1_2_2"]
        assert h.tool.executed_ids == ["call_1", "call_1_3"]
