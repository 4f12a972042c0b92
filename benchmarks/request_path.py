"""Request cost per model attempt: the SDKs' ``create()`` vs the providers' pre-serialised post.

Both paths run over the same SDK client whose httpx transport answers in
memory with a one-event stream, so only the request side is timed: building
the parameters from history, the SDK's transform and copies (``create()``)
or one orjson serialisation (``Provider.stream``), headers, sending and
closing the response. Histories of several lengths show how each path grows
with the conversation; runs are interleaved, best of ``--rounds``.

Run: ``python -m benchmarks.request_path [--turns 2,20,200] [--rounds 5] [--reps 200]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anthropic
import httpx2
import openai

from tests.support.fake_provider import anthropic_sse, openai_sse
from toolprep.messages.content import (
    Content,
    FunctionCall,
    FunctionCallPart,
    FunctionResponse,
    FunctionResponsePart,
    TextPart,
    ThoughtPart,
)
from toolprep.runtime.providers.anthropic_provider import AnthropicProvider, build_messages_params
from toolprep.runtime.providers.base import ModelRequest, ToolDeclaration
from toolprep.runtime.providers.openai_provider import OpenAIProvider, build_chat_params

TOOLS = tuple(
    ToolDeclaration(
        f"tool_{i}",
        "A tool with a small schema",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    )
    for i in range(7)
)


def request_with(turns: int) -> ModelRequest:
    """A history of ``turns`` tool rounds: thought, text, a call, its result."""
    history: list[Content] = [Content("user", (TextPart("start"),))]
    for i in range(turns):
        history.append(
            Content(
                "model",
                (
                    ThoughtPart(f"thinking about step {i}", f"sig{i}"),
                    TextPart(f"Step {i}: reading."),
                    FunctionCallPart(FunctionCall(f"c{i}", "tool_0", {"path": f"f{i}.txt"})),
                ),
            )
        )
        output = {"output": "line of file content\n" * 20}
        history.append(
            Content("user", (FunctionResponsePart(FunctionResponse(f"c{i}", "tool_0", output)),))
        )
    return ModelRequest(model="bench", history=tuple(history), system="Be brief.", tools=TOOLS)


def _client(name: str) -> tuple[Any, Any]:
    body = (anthropic_sse if name == "anthropic" else openai_sse)(text="ok").encode()

    def answer(_request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(answer))
    if name == "anthropic":
        a = anthropic.AsyncAnthropic(
            base_url="http://bench.invalid", api_key="k", max_retries=0, http_client=http
        )
        return a, AnthropicProvider(a)
    o = openai.AsyncOpenAI(
        base_url="http://bench.invalid/v1", api_key="k", max_retries=0, http_client=http
    )
    return o, OpenAIProvider(o, max_tokens_field="max_tokens")


async def _measure(name: str, turns: int, rounds: int, reps: int) -> dict[str, float]:
    client, provider = _client(name)
    request = request_with(turns)

    async def via_create() -> None:
        if name == "anthropic":
            stream = await client.messages.create(**build_messages_params(request), stream=True)
        else:
            stream = await client.chat.completions.create(**build_chat_params(request), stream=True)
        async for _ in stream:
            pass

    async def via_post() -> None:
        async for _ in provider.stream(request):
            pass

    paths: dict[str, Callable[[], Awaitable[None]]] = {"create": via_create, "post": via_post}
    best = {key: float("inf") for key in paths}
    try:
        for _ in range(rounds):
            for key, path in paths.items():
                start = time.process_time_ns()
                for _ in range(reps):
                    await path()
                best[key] = min(best[key], (time.process_time_ns() - start) / reps / 1000)
    finally:
        await provider.aclose()
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", default="2,20,200", help="history lengths in tool rounds")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=200)
    args = parser.parse_args(argv)
    print(f"{'provider':<10}{'turns':>6}{'create() us':>13}{'post us':>10}{'ratio':>7}")
    for name in ("anthropic", "openai"):
        for turns in (int(t) for t in args.turns.split(",")):
            best = asyncio.run(
                _measure(name, turns, args.rounds, max(1, args.reps // (1 + turns // 20)))
            )
            ratio = best["create"] / best["post"]
            print(f"{name:<10}{turns:>6}{best['create']:>13.0f}{best['post']:>10.0f}{ratio:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
