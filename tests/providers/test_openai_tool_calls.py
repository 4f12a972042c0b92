"""OpenAIToolCalls on its own: the fast path's answer and the calls completed at the finish."""

from __future__ import annotations

from toolprep.messages.content import FinishReason, FunctionCall, FunctionCallPart, Part
from toolprep.messages.preparation import ToolCallPreparation
from toolprep.runtime.providers.openai_tool_calls import OpenAIToolCalls


def _fragment(index: int, arguments: str) -> dict[str, object]:
    return {"index": index, "function": {"arguments": arguments}}


def test_an_argument_fragment_takes_the_fast_path_only_once_its_call_is_announced() -> None:
    calls = OpenAIToolCalls(["read_file"])

    assert calls.append_arguments(_fragment(0, '{"pa')) is False  # no call at index 0 yet
    announced = calls.read_items(
        [{"index": 0, "id": "call_1", "function": {"name": "read_file", "arguments": ""}}], None
    )
    assert announced == [ToolCallPreparation("call_1", "read_file")]
    assert calls.append_arguments(_fragment(0, '{"path": ')) is True
    assert calls.append_arguments(_fragment(0, '"a.txt"}')) is True
    assert calls.append_arguments({"index": 0, "id": "x", "function": {}}) is False

    out: list[Part] = []
    assert calls.complete(out, None, FinishReason.STOP, "tool_calls") is None
    assert out == [FunctionCallPart(FunctionCall("call_1", "read_file", {"path": "a.txt"}))]


def test_complete_announces_unannounced_calls_and_orders_them_by_index() -> None:
    calls = OpenAIToolCalls()
    calls.read_items([{"index": 1, "function": {"name": "glob", "arguments": "{}"}}], None)
    calls.read_items([{"index": 0, "id": "call_a", "function": {"name": "read"}}], None)

    out: list[Part] = []
    preparations = calls.complete(out, [], FinishReason.STOP, "tool_calls")

    assert preparations == []  # call_a was announced when it came; the other has no id
    assert out == [
        FunctionCallPart(FunctionCall("call_a", "read", {})),
        FunctionCallPart(FunctionCall("call_gen_1", "glob", {})),
    ]
