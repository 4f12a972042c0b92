"""Building a real provider from a name and a few connection settings.

The SDK clients keep their own connection pool, so one provider (one
client) is built per process and shared by every session and stream.
The streams are posted over aiohttp by the provider itself
(``DirectPost``), with the SDK client's URL, headers and timeouts, unless a
caller brings its own ``http_client`` (then through that httpx client).
Nothing is retried below the supervisor: ``max_retries`` is still set on
the SDK client, for calls made through the SDK itself, but a stream's
failures (before it starts or mid-way) are the supervisor's to retry, with
its own policy. The aiohttp session opens lazily on the loop of the first
stream and belongs to it; ``Provider.aclose`` must run on that same loop.

Each SDK is imported here, when its provider is built, and by no module at
import time: an ``import anthropic`` alone costs over a second of CPU, which
the replay provider, and every reply before the first stream, must not wait for.
"""

from __future__ import annotations

import os
from typing import Literal

import httpx2

from toolprep.runtime.providers.anthropic_provider import AnthropicProvider
from toolprep.runtime.providers.base import Provider
from toolprep.runtime.providers.openai_provider import OpenAIProvider
from toolprep.runtime.providers.sdks import check_provider_key
from toolprep.runtime.providers.sse import DEFAULT_MAX_EVENT_BYTES

__all__ = ["DEFAULT_TIMEOUT", "build_provider"]

DEFAULT_TIMEOUT = httpx2.Timeout(600.0, connect=10.0, read=300.0)
"""Long enough for slow reasoning streams; ``read`` bounds silence between bytes."""


def build_provider(
    name: Literal["anthropic", "openai"] | str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    max_retries: int = 2,
    timeout: float | httpx2.Timeout = DEFAULT_TIMEOUT,
    http_client: httpx2.AsyncClient | None = None,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
) -> Provider:
    """An ``AnthropicProvider`` or ``OpenAIProvider`` on a fresh async SDK client.

    Keys default to the SDKs' environment variables. An OpenAI-compatible
    server given by ``base_url`` may need no key at all, so one is only
    required for the default OpenAI endpoint. ``max_event_bytes`` caps one
    SSE event of a response (see ``SseDecoder``). ``http_client`` carries the
    streams instead of the provider's aiohttp session (and is the SDK
    client's); ``timeout`` applies either way, per request.
    """
    check_provider_key(name, api_key=api_key, base_url=base_url)
    if name == "anthropic":
        import anthropic

        anthropic_client = anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=base_url,
            max_retries=max_retries,
            timeout=timeout,
            http_client=http_client or anthropic.DefaultAioHttpClient(),
        )
        return AnthropicProvider(
            anthropic_client, max_event_bytes=max_event_bytes, http_client=http_client
        )
    if name == "openai":
        import openai

        key = api_key or os.environ.get("OPENAI_API_KEY") or "unused"
        openai_client = openai.AsyncOpenAI(
            api_key=key,
            base_url=base_url,
            max_retries=max_retries,
            timeout=timeout,
            http_client=http_client or openai.DefaultAioHttpClient(),
        )
        return OpenAIProvider(
            openai_client, max_event_bytes=max_event_bytes, http_client=http_client
        )
    raise ValueError(f"unknown provider {name!r}: use anthropic or openai")
