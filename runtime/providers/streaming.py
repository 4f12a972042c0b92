"""The read loop both providers share: HTTP body bytes -> SSE -> adapter -> chunks.

``DirectPost`` sends the request with what the SDK client would send and
maps a failed answer to the SDK's own exception; from the first body byte
we read the raw body ourselves: the SDKs' typed streams validate a pydantic
object per event, several times the cost of our whole adapter.

Failures are mapped to ``StreamError`` here so the supervisor never sees a
provider- or SDK-specific exception:

- a non-2xx answer -> ``status_error`` rules:
  429 / 408 / 409 / 5xx / 529 retryable with ``retry_after`` from the
  headers, other 4xx final;
- connection refused, timeouts, a connection cut mid-body -> retryable
  ``transport``; a refused connection is named as such, with the URL, since
  an SDK may report it as a timeout (OpenAI's says "Request timed out.");
- the body ends cleanly but without the terminal marker -> retryable
  ``truncated`` (raised by the adapter's ``end``);
- a success status whose body is not an event stream (a proxy's HTML page,
  plain JSON from a server that ignored ``stream``) -> final
  ``not_event_stream``, naming the content type and the start of the body;
- one event larger than ``max_event_bytes`` -> final ``event_too_large``
  (raised by the decoder).

A body is taken as an event stream when its content type says so, or, for
servers that label SSE loosely (``text/plain``, no type at all), when its
first line is an SSE field or comment.
"""

from __future__ import annotations

import errno
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx2
import orjson

from toolprep.messages.content import GenerateContentResponse
from toolprep.runtime.providers.base import StreamError
from toolprep.runtime.providers.errors import not_event_stream, status_error
from toolprep.runtime.providers.sse import DEFAULT_MAX_EVENT_BYTES, SseDecoder

__all__ = [
    "Reply",
    "StreamAdapter",
    "body_status_error",
    "connection_refused",
    "not_found_at",
    "sdk_error_explained",
    "sdk_status_error",
    "stream_chunks",
    "transport_error",
]


class StreamAdapter(Protocol):
    """What ``AnthropicStreamAdapter`` and ``OpenAIStreamAdapter`` both offer."""

    def feed(self, event: str | None, data: str | bytes) -> list[GenerateContentResponse]: ...

    def end(self) -> list[GenerateContentResponse]: ...


@dataclass(slots=True)
class Reply:
    """A 2xx answer being read: ``read`` returns the next body bytes, ``b""`` at the end.

    ``read`` is the transport's own read (aiohttp's ``content.readany``), so a
    body chunk reaches the decoder with no object of ours around it.
    """

    content_type: str | None
    read: Callable[[], Awaitable[bytes]]
    close: Callable[[], Awaitable[None]]


async def stream_chunks(
    open_reply: Callable[[], Awaitable[Reply]],
    adapter: StreamAdapter,
    *,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    read_errors: tuple[type[BaseException], ...] = (),
    read_failed: Callable[[BaseException], StreamError] | None = None,
) -> AsyncIterator[GenerateContentResponse]:
    """The one stream both wires (and the replay provider) run: open, decode, adapt, close.

    ``open_reply`` sends the request and raises ``StreamError`` for an answer
    that is not a 2xx; a ``read_errors`` exception while reading the body
    (a connection cut mid-stream) becomes ``read_failed(exc)``, by default a
    ``transport_error``.
    """
    reply = await open_reply()
    try:
        decoder = SseDecoder(max_event_bytes=max_event_bytes)
        decode = decoder.feed
        feed = adapter.feed
        read = reply.read
        if not _declares_event_stream(reply.content_type):
            head = await _read_head(read)
            if not _starts_like_sse(head):
                raise not_event_stream(reply.content_type, head)
            for event, data in decode(head):
                for chunk in feed(event, data):
                    yield chunk
        while raw := await read():
            for event, data in decode(raw):
                for chunk in feed(event, data):
                    yield chunk
        for event, data in decoder.end():
            for chunk in feed(event, data):
                yield chunk
        for chunk in adapter.end():
            yield chunk
    except read_errors as exc:
        failure = (read_failed or transport_error)(exc)
        raise failure from (failure.__cause__ or exc)
    finally:
        await reply.close()


_HEAD_BYTES = 512
_SSE_LINE_STARTS = (b"data:", b"event:", b"id:", b"retry:", b":")


def _declares_event_stream(content_type: str | None) -> bool:
    if not content_type:
        return False
    return content_type.split(";", 1)[0].strip().lower() == "text/event-stream"


async def _read_head(read: Callable[[], Awaitable[bytes]]) -> bytes:
    """The first bytes of the body (up to EOF); the rest is left to ``read``."""
    head = bytearray()
    while len(head) < _HEAD_BYTES and (raw := await read()):
        head += raw
    return bytes(head)


def _starts_like_sse(head: bytes) -> bool:
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip(b"\r\n")
    return text.startswith(_SSE_LINE_STARTS)


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


def sdk_error_explained(exc: Any) -> bool:
    """Whether the error body said what went wrong (else the SDK made up ``Error code: N``)."""
    return bool(_body_message(getattr(exc, "body", None), "")[0])


def not_found_at(failure: StreamError, url: str, base_url: str) -> StreamError:
    """A bare 404: name the URL that has no API behind it, and the usual fix.

    OpenAI-compatible servers serve the API under ``/v1``; a base URL without
    it posts to ``/chat/completions``, which answers 404 with nothing to say.
    """
    message = f"nothing answered at {url} (HTTP 404); check the provider's base URL"
    if url.endswith("/chat/completions") and "/v1" not in httpx2.URL(base_url).path:
        message += f": OpenAI-compatible servers serve it under /v1, try {base_url.rstrip('/')}/v1"
    return StreamError(
        message,
        retryable=failure.retryable,
        kind=failure.kind,
        status=failure.status,
        retry_after=failure.retry_after,
    )


def body_status_error(status: int, body: bytes, headers: Mapping[str, str]) -> StreamError:
    """Map a non-2xx answer read without an SDK (the replay provider's), as the SDKs would."""
    try:
        parsed = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        parsed = None
    preview = body[:200].decode("utf-8", "replace").strip()
    fallback = f"HTTP {status}: {preview}" if preview else f"HTTP {status}"
    message, error_type = _body_message(parsed, fallback)
    return status_error(status, message, headers, error_type=error_type)


def connection_refused(exc: BaseException) -> bool:
    """Whether ``exc``, or an exception it was raised from, is a refused connection."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError) or (
            isinstance(current, OSError) and current.errno == errno.ECONNREFUSED
        ):
            return True
        current = current.__cause__ or current.__context__
    return False


def transport_error(exc: BaseException, url: object = None) -> StreamError:
    """The network failed (before or during the stream); a new attempt may get through.

    A refused connection says so and names ``url`` (the provider's base URL): the
    SDK's own text for it can be "Request timed out.", which sends the user looking
    for a slow server when nothing is listening at all.
    """
    if url is not None and connection_refused(exc):
        message = f"connection refused: nothing is listening at {url}"
    elif (cut := _body_cut_short(exc)) is not None:
        message = f"connection failed: the response ended before it was complete ({cut})"
    else:
        message = f"connection failed: {str(exc) or type(exc).__name__}"
    return StreamError(message, retryable=True, kind="transport")


def _body_cut_short(exc: BaseException) -> str | None:
    """What the HTTP parser said when a body ended early, or ``None`` if none did.

    aiohttp reports a cut body as ``ClientPayloadError`` around a parser error
    (``TransferEncodingError``, ``ContentLengthError``) whose text reads
    ``400, message='Not enough data ...'``: the 400 is the parser's code, not an
    HTTP status the server sent, so only the parser's own message is kept.
    """
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        message = getattr(current, "message", None)
        if (
            isinstance(message, str)
            and isinstance(getattr(current, "code", None), int)
            and type(current).__name__ in _BODY_CUT_ERRORS
        ):
            return message.strip().rstrip(".") or type(current).__name__
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
        pending.extend(a for a in current.args if isinstance(a, BaseException))
    return None


_BODY_CUT_ERRORS = frozenset(
    {"TransferEncodingError", "ContentLengthError", "PayloadEncodingError"}
)
