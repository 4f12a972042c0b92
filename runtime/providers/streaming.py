"""The read loop both providers share: HTTP body bytes -> SSE -> adapter -> chunks.

The SDKs do everything up to the first response byte (auth, base URL,
headers, retries before the stream starts, status errors). From there we
read the raw body ourselves: the SDKs' typed streams validate a pydantic
object per event, several times the cost of our whole adapter.

Failures are mapped to ``StreamError`` here so the supervisor never sees a
provider- or SDK-specific exception:

- a non-2xx answer (after the SDK's own retries) -> ``status_error`` rules:
  429 / 408 / 409 / 5xx / 529 retryable with ``retry_after`` from the
  headers, other 4xx final;
- connection refused, timeouts, a connection cut mid-body -> retryable
  ``transport``;
- the body ends cleanly but without the terminal marker -> retryable
  ``truncated`` (raised by the adapter's ``end``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

import httpx2

from toolprep.messages.content import GenerateContentResponse
from toolprep.runtime.providers.base import StreamError
from toolprep.runtime.providers.errors import status_error
from toolprep.runtime.providers.sse import SseDecoder

__all__ = ["StreamAdapter", "pump_sse", "sdk_status_error", "transport_error"]


class StreamAdapter(Protocol):
    """What ``AnthropicStreamAdapter`` and ``OpenAIStreamAdapter`` both offer."""

    def feed(self, event: str | None, data: str | bytes) -> list[GenerateContentResponse]: ...

    def end(self) -> list[GenerateContentResponse]: ...


async def pump_sse(
    response: httpx2.Response, adapter: StreamAdapter
) -> AsyncIterator[GenerateContentResponse]:
    """Yield the adapter's chunks for one streamed HTTP response, in order."""
    decoder = SseDecoder()
    decode = decoder.feed
    feed = adapter.feed
    async for raw in response.aiter_bytes():
        for event, data in decode(raw):
            for chunk in feed(event, data):
                yield chunk
    for event, data in decoder.end():
        for chunk in feed(event, data):
            yield chunk
    for chunk in adapter.end():
        yield chunk


def _body_message(body: Any, fallback: str) -> tuple[str, str | None]:
    """``(message, error type)`` from an error body in Anthropic or OpenAI shape."""
    error = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(error, dict):
        message = error.get("message")
        error_type = error.get("type")
        return (
            message if isinstance(message, str) and message else fallback,
            error_type if isinstance(error_type, str) else None,
        )
    if isinstance(error, str) and error:
        return error, None
    return fallback, None


def sdk_status_error(exc: Any) -> StreamError:
    """Map either SDK's ``APIStatusError`` (duck-typed: both have the same shape)."""
    response: httpx2.Response = exc.response
    message, error_type = _body_message(
        getattr(exc, "body", None), str(getattr(exc, "message", exc))
    )
    return status_error(response.status_code, message, response.headers, error_type=error_type)


def transport_error(exc: BaseException) -> StreamError:
    """The network failed (before or during the stream); a new attempt may get through."""
    detail = str(exc) or type(exc).__name__
    return StreamError(f"connection failed: {detail}", retryable=True, kind="transport")
