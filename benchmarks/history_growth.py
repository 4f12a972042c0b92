"""History growth: does a request's body cost more on turn 500 than on turn 1?

For each wire the provider's own ``request_body`` is timed (thread CPU, µs per
request) in two sessions side by side:

- ``1 turn``: a fresh session's first request (a new prompt each time, so
  nothing of it is cached);
- ``500 turns``: a session whose history already holds 500 turns (a tool call,
  its result, an answer and the next prompt each), where every request adds
  one more turn, as a session does.

``ratio`` is the second over the first: 1.0 means a request's CPU does not
grow with the session. ``full`` is what converting and serialising the whole
500-turn history costs (``build_*_params`` plus one JSON encoding, what each
request paid before the history was encoded once per turn), for scale, and
``KiB`` the long session's body: what is left of the growth is copying the
encoded history into the body once (the socket copies it again anyway).

Run: ``python -m benchmarks.history_growth [--turns 500] [--requests 300]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from toolprep.messages.content import (
    Content,
    FunctionCall,
    FunctionCallPart,
    FunctionResponse,
    FunctionResponsePart,
    TextPart,
)
from toolprep.runtime.providers.anthropic_provider import AnthropicProvider, build_messages_params
from toolprep.runtime.providers.base import ModelRequest, ToolDeclaration
from toolprep.runtime.providers.factory import build_provider
from toolprep.runtime.providers.openai_provider import OpenAIProvider, build_chat_params
from toolprep.runtime.providers.request_body import encode_request_body

TOOLS = tuple(
    ToolDeclaration(
        f"tool_{n}",
        f"Tool number {n}",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    )
    for n in range(20)
)


def _turn(n: int) -> tuple[Content, ...]:
    """One turn: the model calls a tool, gets its result, answers; the user asks again."""
    call_id = f"call_{n}"
    return (
        Content(
            "model",
            (
                TextPart(f"Reading file {n}."),
                FunctionCallPart(FunctionCall(call_id, "tool_1", {"path": f"src/file_{n}.py"})),
            ),
        ),
        Content(
            "user",
            (
                FunctionResponsePart(
                    FunctionResponse(call_id, "tool_1", {"output": f"contents of file {n}\n" * 20})
                ),
            ),
        ),
        Content("model", (TextPart(f"File {n} defines a few functions. " * 4),)),
        Content("user", (TextPart(f"Now look at file {n + 1}."),)),
    )


def _request(history: tuple[Content, ...]) -> ModelRequest:
    return ModelRequest(model="bench-model", history=history, system="Be brief.", tools=TOOLS)


def _cpu_us(action: Callable[[], object], requests: int) -> float:
    start = time.thread_time_ns()
    for _ in range(requests):
        action()
    return (time.thread_time_ns() - start) / requests / 1000


def _provider(wire: str) -> AnthropicProvider | OpenAIProvider:
    provider = build_provider(wire, base_url="http://127.0.0.1:9", api_key="bench")
    assert isinstance(provider, AnthropicProvider | OpenAIProvider)
    return provider


def _full_body(wire: str, provider: Any, request: ModelRequest) -> bytes:
    if wire == "anthropic":
        params = build_messages_params(request)
    else:
        params = build_chat_params(request, max_tokens_field=provider.max_tokens_field)
    return encode_request_body({**params, "stream": True})


def measure(wire: str, turns: int, requests: int) -> dict[str, float]:
    """µs per request: first requests of fresh sessions, requests on a long session, and a
    full conversion of the long history."""
    provider = _provider(wire)
    prompts = iter(range(10**9))

    def first_request() -> bytes:
        prompt = Content("user", (TextPart(f"Prompt {next(prompts)}: look at file 0."),))
        return provider.request_body(_request((prompt,)))

    history: tuple[Content, ...] = (Content("user", (TextPart("Look at file 0."),)),)
    for n in range(turns):
        history += _turn(n)
    provider.request_body(_request(history))  # the session's requests so far
    grown = iter(range(turns, turns + requests + 1))

    def next_request() -> bytes:
        nonlocal history
        history += _turn(next(grown))
        return provider.request_body(_request(history))

    long_request = _request(history)
    one = _cpu_us(first_request, requests)
    many = _cpu_us(next_request, requests)
    full = _cpu_us(lambda: _full_body(wire, provider, long_request), max(1, requests // 10))
    kib = len(provider.request_body(_request(history))) / 1024
    return {"one": one, "many": many, "full": full, "kib": kib}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    print(
        f"{'wire':<10} {'1 turn µs':>10} {f'{args.turns} turns µs':>14} {'ratio':>6}"
        f" {f'full {args.turns} µs':>14} {'KiB':>7}"
    )
    for wire in ("anthropic", "openai"):
        got = measure(wire, args.turns, args.requests)
        print(
            f"{wire:<10} {got['one']:>10.1f} {got['many']:>14.1f}"
            f" {got['many'] / got['one']:>6.2f} {got['full']:>14.1f} {got['kib']:>7.0f}"
        )


if __name__ == "__main__":
    main()
