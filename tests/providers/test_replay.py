"""The embedded replay provider: the default script plays through the real stream path."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.providers.helpers import collect, flat, text_of
from tests.support.eventually import eventually_async
from toolprep.messages.content import (
    Content,
    FunctionCall,
    FunctionCallPart,
    FunctionResponse,
    FunctionResponsePart,
    GenerateContentResponse,
    Part,
    TextPart,
)
from toolprep.messages.preparation import get_preparations
from toolprep.runtime.providers.base import ModelRequest, Provider, StreamError
from toolprep.runtime.providers.replay import ReplayProvider, ReplayScript, ReplayTransport
from toolprep.testing import openai_sse


def replay(
    provider: Provider, req: ModelRequest
) -> tuple[list[GenerateContentResponse], StreamError | None]:
    """``collect`` for the replay provider: its in-memory transport can serve many loops."""
    return collect(provider, req, keep_open=True)


def user(text: str) -> Content:
    return Content("user", (TextPart(text),))


def model(*parts: Part) -> Content:
    return Content("model", parts)


def results(*calls: tuple[str, str]) -> Content:
    return Content(
        "user",
        tuple(
            FunctionResponsePart(FunctionResponse(cid, name, {"output": "ok"}))
            for cid, name in calls
        ),
    )


def request(*history: Content) -> ModelRequest:
    return ModelRequest(model="replay", history=history)


def default_provider(
    pace_scale: float = 0.0,
) -> tuple[ReplayProvider, ReplayTransport]:
    transport = ReplayTransport(ReplayScript.load(), pace_scale=pace_scale)
    return ReplayProvider.from_transport(transport), transport


def calls_of(chunks: list[GenerateContentResponse]) -> list[FunctionCall]:
    return [fc for c in chunks for fc in c.function_calls]


def test_default_script_plays_through_the_demo() -> None:
    provider, transport = default_provider()
    assert provider.name == "replay"
    u1 = user("Read README.md and tell me what this project is.")

    chunks, error = replay(provider, request(u1))
    assert error is None
    items = [i for i in flat(chunks) if i.startswith(("prep", "call", "finish"))]
    assert items == [
        "prep toolu_replay_read_1 read_file",
        'call toolu_replay_read_1 read_file {"path": "README.md"}',
        "finish STOP",
    ]
    read = calls_of(chunks)[0]

    history: tuple[Content, ...] = (
        u1,
        model(FunctionCallPart(read)),
        results((read.id, read.name)),
    )
    chunks, error = replay(provider, request(*history))
    assert error is None and not calls_of(chunks)
    assert "demo project" in text_of(chunks)

    history += (model(TextPart("It is a demo.")), user("Write a short NOTES.md for this project."))
    chunks, error = replay(provider, request(*history))
    assert error is not None and (error.kind, error.retryable) == ("overloaded", True)
    assert [i for i in flat(chunks) if i.startswith(("prep", "call"))] == [
        "prep toolu_replay_write_1 write_file"
    ]

    chunks, error = replay(provider, request(*history))  # the retry gets the next response
    assert error is None
    (write,) = calls_of(chunks)
    assert (write.id, write.name, write.args["path"]) == (
        "toolu_replay_write_2",
        "write_file",
        "NOTES.md",
    )
    assert write.args["content"].startswith("# Notes")

    history += (model(FunctionCallPart(write)), results((write.id, write.name)))
    chunks, error = replay(provider, request(*history))
    assert error is None and "NOTES.md" in text_of(chunks)

    history += (model(TextPart("Done.")), user("Search the whole project for TODO markers."))
    got = _read_until_stalled(provider, request(*history))
    assert [i for i in flat(got) if i.startswith(("prep", "call"))] == [
        "prep toolu_replay_search_1 search"
    ]
    assert transport.served == [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2), (2, 0)]


def _read_until_stalled(
    provider: ReplayProvider, req: ModelRequest
) -> list[GenerateContentResponse]:
    """Read a stream that hangs: once it has a preparation and goes quiet, cancel it."""

    async def go() -> list[GenerateContentResponse]:
        got: list[GenerateContentResponse] = []

        async def read() -> None:
            async for chunk in provider.stream(req):
                got.append(chunk)

        task = asyncio.create_task(read())
        await eventually_async(lambda: any(get_preparations(c) for c in got))
        await asyncio.sleep(0.1)
        assert not task.done(), "the stream should stall until cancelled"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await provider.aclose()
        return got

    return asyncio.run(go())


def test_arguments_stream_slowly_enough_to_see_the_preparing_phase() -> None:
    provider, _ = default_provider(pace_scale=1.0)

    async def go() -> list[tuple[float, GenerateContentResponse]]:
        stamped = []
        async for chunk in provider.stream(request(user("Read README.md"))):
            stamped.append((time.monotonic(), chunk))
        await provider.aclose()
        return stamped

    stamped = asyncio.run(go())
    prepared_at = next(t for t, c in stamped if get_preparations(c))
    called_at = next(t for t, c in stamped if c.function_calls)
    assert called_at - prepared_at >= 0.2


def test_a_prompt_no_turn_matches_gets_a_hint() -> None:
    provider, transport = default_provider()
    chunks, error = replay(provider, request(user("hello there")))
    assert error is None
    text = text_of(chunks)
    assert "replay provider" in text and "'README'" in text
    assert transport.served == [(None, 0)]


def test_turns_are_chosen_by_match_and_conversations_are_separate() -> None:
    provider, transport = default_provider()
    replay(provider, request(user("please write notes")))
    replay(provider, request(user("what does the README say")))
    assert transport.served == [(1, 0), (0, 0)]


def test_each_session_plays_the_script_from_its_start() -> None:
    provider, transport = default_provider()
    prompt = user("Read README.md and tell me what this project is.")
    for session in ("sess_a", "sess_b", "sess_a"):  # sess_a again: a retry of its request
        _, error = replay(provider, replace(request(prompt), conversation=session))
        assert error is None
    # Each session begins the README turn; the same request again is its retry.
    assert transport.served == [(0, 0), (0, 0), (0, 1)]


def _script(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(data))
    return path


def test_openai_script_with_file_inline_and_status_responses(tmp_path: Path) -> None:
    (tmp_path / "streams").mkdir()
    (tmp_path / "streams" / "call.sse").write_text(
        openai_sse(tool_calls=[("call_1", "glob", {"pattern": "*.py"})])
    )
    path = _script(
        tmp_path,
        {
            "provider": "openai",
            "turns": [
                {
                    "match": None,
                    "responses": [
                        {
                            "status": 529,
                            "body": {"error": {"message": "busy", "type": "overloaded_error"}},
                            "headers": {"retry-after": "2"},
                        },
                        {"sse_file": "streams/call.sse"},
                        {"sse": openai_sse(text="all done")},
                    ],
                }
            ],
        },
    )
    provider = ReplayProvider.from_script(path, pace_scale=0)
    assert provider.wire == "openai"
    u = user("anything")
    _, error = replay(provider, request(u))
    assert error is not None and (error.status, error.retryable, error.retry_after) == (
        529,
        True,
        2.0,
    )
    chunks, error = replay(provider, request(u))
    assert error is None and [fc.args for fc in calls_of(chunks)] == [{"pattern": "*.py"}]
    history = (u, model(FunctionCallPart(calls_of(chunks)[0])), results(("call_1", "glob")))
    chunks, error = replay(provider, request(*history))
    assert text_of(chunks) == "all done"
    chunks, error = replay(provider, request(*history))  # the turn has run out of responses
    assert "no further responses" in text_of(chunks)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "must be a JSON object"),
        ({"provider": "gemini", "turns": []}, "provider must be"),
        ({"provider": "openai", "turns": {}}, "turns must be a list"),
        ({"provider": "openai", "turns": [{"match": None}]}, "needs a responses list"),
        ({"provider": "openai", "turns": [{"match": 3, "responses": []}]}, "match must be"),
        ({"provider": "openai", "turns": [{"responses": [{"pace_ms": 1}]}]}, "needs sse_file, sse"),
        (
            {
                "provider": "openai",
                "turns": [{"responses": [{"sse": "", "stall_after_events": -1}]}],
            },
            "stall_after_events",
        ),
    ],
)
def test_invalid_scripts_are_rejected_with_a_reason(
    tmp_path: Path, data: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ReplayProvider.from_script(_script(tmp_path, data))


def test_missing_script_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        ReplayProvider.from_script(tmp_path / "absent.json")


def test_stalled_response_hangs_until_cancelled(tmp_path: Path) -> None:
    path = _script(
        tmp_path,
        {
            "provider": "openai",
            "turns": [
                {
                    "responses": [
                        {
                            "sse": openai_sse(
                                tool_calls=[("call_s", "search", {"pattern": "x"})], fragment_size=1
                            ),
                            "stall_after_events": 3,
                        }
                    ]
                }
            ],
        },
    )
    got = _read_until_stalled(ReplayProvider.from_script(path, pace_scale=0), request(user("x")))
    assert [i for i in flat(got) if i.startswith(("prep", "call"))] == ["prep call_s search"]


def test_stream_errors_surface_as_stream_error(tmp_path: Path) -> None:
    path = _script(
        tmp_path,
        {"provider": "anthropic", "turns": [{"responses": [{"sse": "data: {broken\n\n"}]}]},
    )
    _, error = collect(ReplayProvider.from_script(path), request(user("x")))
    assert isinstance(error, StreamError) and error.kind == "malformed"
