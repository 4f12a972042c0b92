"""Shared helpers for the provider tests: chunk summaries and running a real provider."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from typing import Any

from tests.support.fixtures import PROVIDER_TRANSCRIPTS
from toolprep.messages.content import (
    FunctionCallPart,
    GenerateContentResponse,
    TextPart,
    ThoughtPart,
)
from toolprep.messages.preparation import get_preparations
from toolprep.runtime.providers.base import ModelRequest, Provider, StreamError
from toolprep.runtime.providers.factory import build_provider
from toolprep.runtime.providers.sse import decode_sse

FIXTURES = PROVIDER_TRANSCRIPTS


def summarize(chunk: GenerateContentResponse) -> tuple[str, ...]:
    """One chunk as short strings: preparations first, then parts, finish reason, usage."""
    items = [f"prep {p.call_id} {p.tool_name}" for p in get_preparations(chunk)]
    for part in chunk.parts:
        if isinstance(part, TextPart):
            items.append(f"text {part.text}")
        elif isinstance(part, ThoughtPart):
            items.append(
                f"thought {part.text}" + (f" sig={part.signature}" if part.signature else "")
            )
        elif isinstance(part, FunctionCallPart):
            fc = part.function_call
            items.append(f"call {fc.id} {fc.name} {json.dumps(fc.args, sort_keys=True)}")
    if chunk.finish_reason is not None:
        items.append(f"finish {chunk.finish_reason.value}")
    if chunk.usage is not None:
        items.append(f"usage {chunk.usage.input_tokens}/{chunk.usage.output_tokens}")
    return tuple(items)


def summarize_all(chunks: Iterable[GenerateContentResponse]) -> list[tuple[str, ...]]:
    return [summarize(c) for c in chunks]


def flat(chunks: Iterable[GenerateContentResponse]) -> list[str]:
    """All summary items in order, chunk boundaries dropped."""
    return [item for c in chunks for item in summarize(c)]


def run_adapter(adapter: Any, sse: str | bytes) -> list[GenerateContentResponse]:
    """Feed a whole transcript through an adapter, including ``end()``."""
    out: list[GenerateContentResponse] = []
    for event, data in decode_sse(sse):
        out.extend(adapter.feed(event, data))
    out.extend(adapter.end())
    return out


def anthropic_provider(base_url: str, *, max_retries: int = 0) -> Provider:
    """The production build: the SDK over its aiohttp client."""
    return build_provider(
        "anthropic", base_url=base_url, api_key="test-key", max_retries=max_retries
    )


def openai_provider(base_url: str, *, max_retries: int = 0) -> Provider:
    """The production build: the SDK over its aiohttp client."""
    return build_provider(
        "openai", base_url=base_url + "/v1", api_key="test-key", max_retries=max_retries
    )


def collect(
    provider: Provider, request: ModelRequest, *, keep_open: bool = False
) -> tuple[list[GenerateContentResponse], StreamError | None]:
    """Run one stream to its end; returns the chunks and the StreamError that ended it, if any.

    The stream runs on a loop of its own, which owns the client's sockets: the provider is
    closed before that loop ends, so a provider serves one ``collect``. ``keep_open`` is for
    providers without sockets (the replay script's in-memory transport).
    """

    async def go() -> tuple[list[GenerateContentResponse], StreamError | None]:
        chunks: list[GenerateContentResponse] = []
        try:
            async for chunk in provider.stream(request):
                chunks.append(chunk)
        except StreamError as exc:
            return chunks, exc
        finally:
            if not keep_open:
                await provider.aclose()
        return chunks, None

    return asyncio.run(go())


def text_of(chunks: Iterable[GenerateContentResponse]) -> str:
    """The visible answer text of a stream."""
    return "".join(p.text for c in chunks for p in c.parts if isinstance(p, TextPart))
