"""History encoded once per turn: the body is what a full conversion gives, at every turn.

A session's requests are replayed as the supervisor makes them (the history a tuple
of the very ``Content`` objects the session holds, growing by a turn at a time, cut
back by a rollback, rewritten by compaction). Every body the provider assembles must
parse to exactly what ``build_*_params`` gives for the same request, and only the new
contents may be converted again.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence
from typing import Any

import orjson
import pytest

from toolprep.messages.content import (
    Content,
    FunctionCall,
    FunctionCallPart,
    FunctionResponse,
    FunctionResponsePart,
    Part,
    TextPart,
    ThoughtPart,
)
from toolprep.runtime.kernel.compaction import summary_message
from toolprep.runtime.providers.anthropic_provider import (
    AnthropicProvider,
    build_messages_params,
)
from toolprep.runtime.providers.anthropic_provider import _messages as anthropic_messages
from toolprep.runtime.providers.base import ModelRequest, ToolDeclaration
from toolprep.runtime.providers.factory import build_provider
from toolprep.runtime.providers.history import HistoryBytes
from toolprep.runtime.providers.openai_provider import OpenAIProvider, build_chat_params
from toolprep.runtime.providers.openai_provider import _messages as openai_messages

TOOLS = (ToolDeclaration("read_file", "Read a file"),)
WIRES = ("anthropic", "openai")


def _user(text: str) -> Content:
    return Content("user", (TextPart(text),))


def _calls(*ids: str) -> Content:
    parts: list[Part] = [ThoughtPart("thinking", f"sig-{ids[0]}")] if ids else []
    parts += [FunctionCallPart(FunctionCall(i, "read_file", {"path": f"{i}.txt"})) for i in ids]
    return Content("model", (*parts, TextPart("reading")))


def _results(*ids: str) -> Content:
    return Content(
        "user",
        tuple(
            FunctionResponsePart(FunctionResponse(i, "read_file", {"output": f"text of {i}"}))
            for i in ids
        ),
    )


def _answer(text: str) -> Content:
    return Content("model", (TextPart(text),))


def _provider(wire: str) -> AnthropicProvider | OpenAIProvider:
    provider = build_provider(wire, base_url="http://127.0.0.1:9", api_key="k")
    assert isinstance(provider, AnthropicProvider | OpenAIProvider)
    return provider


def _expected(wire: str, provider: Any, request: ModelRequest) -> Any:
    if wire == "anthropic":
        params = build_messages_params(request)
    else:
        params = build_chat_params(request, max_tokens_field=provider.max_tokens_field)
    return {**params, "stream": True}


def _check(wire: str, provider: Any, history: Sequence[Content]) -> None:
    request = ModelRequest(model="m", history=tuple(history), system="Be brief.", tools=TOOLS)
    assert orjson.loads(provider.request_body(request)) == _expected(wire, provider, request)


@pytest.mark.parametrize("wire", WIRES)
def test_every_turn_of_a_growing_session_sends_the_full_conversion(wire: str) -> None:
    provider = _provider(wire)
    history: list[Content] = [_user("start")]
    _check(wire, provider, history)
    turns: list[tuple[Content, ...]] = [
        (_calls("a", "b"), _results("a", "b")),
        (_calls("c"), _results()),  # a call that never got its result
        (_answer("done"), _user("next")),
        (_calls("d"), _user("interrupting instead of a result")),
        (Content("model", (ThoughtPart("unsigned"),)), _user("a model turn with no blocks")),
        (_calls("e"), _results("e"), _user("and a second user message straight after")),
    ]
    for turn in turns:
        history.extend(turn)
        _check(wire, provider, history)
    for cut in (3, 6):  # a rolled-back turn, then a new one on the shorter history
        del history[cut:]
        history.extend((_calls(f"r{cut}"), _results(f"r{cut}")))
        _check(wire, provider, history)
    history[:4] = [summary_message("what happened so far")]  # compaction
    _check(wire, provider, history)
    history.extend((_answer("after the summary"), _user("go on")))
    _check(wire, provider, history)


Conversion = Callable[[Sequence[Content]], tuple[list[dict[str, Any]], bool]]


ENCODERS = [
    pytest.param(anthropic_messages, lambda m: m[0]["role"] == "assistant", id="anthropic"),
    pytest.param(openai_messages, lambda m: True, id="openai"),
]


@pytest.mark.parametrize(("conversion", "continues"), ENCODERS)
def test_only_the_contents_added_since_the_last_request_are_converted(
    conversion: Conversion, continues: Callable[[list[dict[str, Any]]], bool]
) -> None:
    converted: list[int] = []

    def counting(contents: Sequence[Content]) -> tuple[list[dict[str, Any]], bool]:
        converted.append(len(contents))
        return conversion(contents)

    encoder = HistoryBytes(counting, continues)
    history: tuple[Content, ...] = (_user("start"),)
    for n in range(250):
        history += (_calls(f"c{n}"), _results(f"c{n}"))
    full = encoder.items(history)
    assert full == orjson.dumps(conversion(history)[0])[1:-1]
    history += (_calls("last"), _results("last"))
    assert encoder.items(history) == orjson.dumps(conversion(history)[0])[1:-1]
    assert converted == [501, 2]
    rewritten = (summary_message("summary"), *history[-4:])
    assert encoder.items(rewritten) == orjson.dumps(conversion(rewritten)[0])[1:-1]
    assert converted[-1] == len(rewritten)  # a rewrite starts over


@pytest.mark.parametrize(("conversion", "continues"), ENCODERS)
def test_a_history_nobody_holds_any_more_leaves_the_cache(
    conversion: Conversion, continues: Callable[[list[dict[str, Any]]], bool]
) -> None:
    """A closed session's history, or the one a compaction replaced, is not kept for
    ``SESSIONS_KEPT`` more sessions: long histories would hold megabytes each."""
    encoder = HistoryBytes(conversion, continues)
    kept: tuple[Content, ...] = (_user("kept"), _calls("k0"), _results("k0"))
    history: tuple[Content, ...] = (_user("start"),)
    for n in range(20):
        history += (_calls(f"c{n}"), _results(f"c{n}"))
    encoder.items(kept)
    encoder.items(history)
    assert len(encoder) == 2
    compacted = (summary_message("summary"), *history[-2:])
    encoder.items(compacted)
    del history  # the session now holds only the compacted history
    gc.collect()
    assert len(encoder) == 2  # the kept session's and the compacted one's
    del compacted  # the session closed
    gc.collect()
    assert len(encoder) == 1
    assert encoder.items(kept) == orjson.dumps(conversion(kept)[0])[1:-1]


@pytest.mark.parametrize(("conversion", "continues"), ENCODERS)
def test_a_one_message_history_leaves_the_cache_with_its_message(
    conversion: Conversion, continues: Callable[[list[dict[str, Any]]], bool]
) -> None:
    """A compaction's summary request is a history of one message: the cache's key is also
    its last message, which must not keep it alive."""
    encoder = HistoryBytes(conversion, continues)
    summary_request: tuple[Content, ...] = (_user("Summarise this conversation: ..."),)
    encoder.items(summary_request)
    assert len(encoder) == 1
    del summary_request
    gc.collect()
    assert len(encoder) == 0
