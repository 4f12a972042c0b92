"""One vocabulary of ``StreamError`` kinds for every provider failure.

The supervisor only looks at ``retryable`` and ``retry_after``; ``kind`` is
there so logs, tests and users can tell failures apart without parsing
messages. Kinds used by the provider layer:

- ``malformed``  a data line that is not JSON, or tool arguments that are
  not a JSON object (the attempt's output cannot be trusted);
- ``protocol``   events out of order (e.g. a second ``message_start``);
- ``truncated``  the stream ended without its terminal marker;
- ``transport``  connection refused / cut mid-stream / read timeout;
- ``event_too_large``  one SSE event outgrew the configured cap (final: the
  same server would send the same event again);
- ``not_event_stream``  a success status whose body is not SSE at all, such
  as an HTML page from a proxy or plain JSON from a server that ignored
  ``stream`` (final: a new attempt gets the same page);
- ``setup``      the provider could not be built (its SDK failed to import);
- provider-reported errors by cause: ``overloaded``, ``rate_limit``,
  ``server``, ``timeout``, ``invalid_request``, ``auth``, ``permission``,
  ``not_found``, ``request_too_large``, ``billing``, ``http`` (any other
  status), ``provider`` (an in-band error of unknown type).
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping

from toolprep.runtime.providers.base import StreamError

__all__ = [
    "anthropic_error_kind",
    "event_too_large",
    "format_bytes",
    "malformed",
    "not_event_stream",
    "parse_retry_after",
    "preview",
    "status_error",
    "status_kind",
    "status_retryable",
]

_STATUS_KINDS = {
    400: "invalid_request",
    401: "auth",
    402: "billing",
    403: "permission",
    404: "not_found",
    408: "timeout",
    413: "request_too_large",
    429: "rate_limit",
    504: "timeout",
    529: "overloaded",
}

# Anthropic's documented error ``type`` strings and whether a new attempt may succeed.
_ANTHROPIC_TYPES: dict[str, tuple[str, bool]] = {
    "overloaded_error": ("overloaded", True),
    "rate_limit_error": ("rate_limit", True),
    "api_error": ("server", True),
    "timeout_error": ("timeout", True),
    "invalid_request_error": ("invalid_request", False),
    "authentication_error": ("auth", False),
    "permission_error": ("permission", False),
    "not_found_error": ("not_found", False),
    "request_too_large": ("request_too_large", False),
    "billing_error": ("billing", False),
}


def malformed(message: str) -> StreamError:
    """A broken attempt: retrying may well produce a clean stream."""
    return StreamError(message, retryable=True, kind="malformed")


def format_bytes(size: int) -> str:
    """``8 MiB``, ``512 KiB`` or ``1000 bytes``: the unit a person would have configured."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    if size >= 1 << 20:
        return f"{size / (1 << 20):.1f} MiB"
    return f"{size} bytes"


def event_too_large(limit: int) -> StreamError:
    """Final, not retryable: the same server would stream the same oversized event again."""
    return StreamError(
        f"SSE event exceeded the {format_bytes(limit)} limit without ending; the stream was "
        "abandoned (raise --max-sse-event-bytes if this server really sends events that large)",
        retryable=False,
        kind="event_too_large",
    )


_PREVIEW_CHARS = 200


def _printable(text: str) -> str:
    """Control characters and runs of whitespace as single spaces, so a preview is one line."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())


def preview(text: str) -> str:
    """``text`` on one line, quoted, cut to a few hundred characters: safe to show a person."""
    shown = _printable(text)
    if len(shown) > _PREVIEW_CHARS:
        shown = shown[:_PREVIEW_CHARS] + "..."
    return f"'{shown}'"


def not_event_stream(content_type: str | None, head: bytes) -> StreamError:
    """A 2xx answer that is not an event stream: say what came instead, briefly and safely."""
    shown_type = _printable(content_type)[:100] if content_type else "none"
    return StreamError(
        f"expected a server-sent event stream but received content-type '{shown_type}': "
        f"{preview(head.decode('utf-8', 'replace'))}",
        retryable=False,
        kind="not_event_stream",
    )


def status_kind(status: int) -> str:
    kind = _STATUS_KINDS.get(status)
    if kind is not None:
        return kind
    return "server" if status >= 500 else "http"


def status_retryable(status: int) -> bool:
    """The SDKs' own rule: timeouts, lock conflicts, rate limits and 5xx are worth retrying."""
    return status in (408, 409, 429) or status >= 500


def anthropic_error_kind(error_type: str) -> tuple[str, bool]:
    """``(kind, retryable)`` for an Anthropic error ``type`` (in-band or in an error body)."""
    return _ANTHROPIC_TYPES.get(error_type, ("provider", False))


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait, from ``retry-after-ms``, ``retry-after`` seconds or an HTTP date."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def status_error(
    status: int, message: str, headers: Mapping[str, str], *, error_type: str | None = None
) -> StreamError:
    """Map a non-2xx answer. ``x-should-retry`` from the server overrides the status rule."""
    kind = status_kind(status)
    retryable = status_retryable(status)
    if error_type:
        typed_kind, _ = anthropic_error_kind(error_type)
        if typed_kind != "provider":
            kind = typed_kind
    hint = headers.get("x-should-retry")
    if hint == "true":
        retryable = True
    elif hint == "false":
        retryable = False
    return StreamError(
        message,
        retryable=retryable,
        kind=kind,
        status=status,
        retry_after=parse_retry_after(headers),
    )
