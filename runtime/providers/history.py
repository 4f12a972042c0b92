"""Pieces of history conversion that both wire formats share, and the encoded-history cache.

A session's history only grows between requests, yet converting and
serialising all of it per request made a request's CPU grow with the
session (a tenth of the stream loop at a thousand sessions). ``HistoryBytes``
keeps, per session, the JSON of the messages its last request sent, and
converts and serialises only the contents added since: a request costs the
same on turn 500 as on turn 1.

A session is recognised by the identity of its history's first ``Content``
(histories are tuples of the very objects the session holds). The cached
part is reused only when the new history still holds the same first object
and the same object where the cached part ended: compaction replaces the
first contents with a summary, and a rolled-back turn is cut off and
replaced by new objects, so either rewrite misses the cache and the whole
history is converted again. A wire's conversion is not per content (roles
merge, unanswered calls get error results), so each wire says when its
messages may be cut after the last one (``closed``) and when a conversion
of new contents may follow cached ones (``continues``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any, Final

import orjson

from toolprep.messages.content import Content, FunctionResponse
from toolprep.runtime.providers.request_body import WeakIdentityCache, encode_request_body

__all__ = [
    "MISSING_RESULT",
    "HistoryBytes",
    "MessagesConversion",
    "json_items",
    "tool_result_text",
]

MISSING_RESULT = "The tool call was not executed (the turn ended before it ran)."
"""Sent for a call that has no result in history: both APIs reject an unanswered call."""


def tool_result_text(response: FunctionResponse) -> str:
    """The text a model sees for a tool result: the bare output, or JSON for anything richer."""
    body = response.response
    if len(body) == 1:
        (value,) = body.values()
        if isinstance(value, str):
            return value
    return orjson.dumps(body).decode()


MessagesConversion = Callable[[Sequence[Content]], tuple[list[dict[str, Any]], bool]]
"""Contents -> ``(messages, closed)``; ``closed`` when more contents may be converted on
their own and appended (no call left waiting for its result, no message left to merge)."""


def json_items(values: list[Any]) -> bytes:
    """The JSON of ``values`` without the brackets: items joined by commas."""
    return encode_request_body(values)[1:-1]


class _Encoded:
    """One session's messages up to ``count`` contents, ending at ``last``, as JSON items:
    the first ``length`` bytes of ``buffer``, which grows in place as the session does.

    ``last`` is held weakly: for a one-message history (a compaction's summary request)
    it is the cache's key itself, which a strong reference would keep alive for ever."""

    __slots__ = ("buffer", "count", "last", "length")

    def __init__(self, count: int, last: Content, buffer: bytearray) -> None:
        self.count = count
        self.last = weakref.ref(last)
        self.buffer = buffer
        self.length = len(buffer)


SESSIONS_KEPT: Final = 4096
"""Sessions whose encoded history is kept per provider; more only cost re-encoding."""


class HistoryBytes:
    """One wire's history -> the JSON items of its ``messages`` array, cached per session.

    An entry lives as long as its history's first message does: a closed session's, or
    the history a compaction replaced, goes with it (``WeakIdentityCache``).

    ``items`` returns the cached buffer itself: use it at once (join it into the body),
    since the session's next request extends it in place. That keeps a request to one
    copy of the history, the one into its body, instead of one more per request.
    """

    def __init__(
        self,
        convert: MessagesConversion,
        continues: Callable[[list[dict[str, Any]]], bool],
        *,
        limit: int = SESSIONS_KEPT,
    ) -> None:
        self._convert = convert
        self._continues = continues
        self._cache: WeakIdentityCache[Content, _Encoded] = WeakIdentityCache(limit)

    def __len__(self) -> int:
        return len(self._cache)

    def items(self, history: tuple[Content, ...]) -> bytes | bytearray:
        """The messages for ``history``, comma-joined JSON; converts only what is new."""
        if not history:
            return b""
        cached = self._cache.get(history[0])
        if (
            cached is None
            or len(history) < cached.count
            or history[cached.count - 1] is not cached.last()
        ):
            return self._encode_all(history)
        if len(history) == cached.count:
            buffer = cached.buffer
            return buffer if len(buffer) == cached.length else bytes(buffer[: cached.length])
        messages, closed = self._convert(history[cached.count :])
        if messages and not self._continues(messages):
            return self._encode_all(history)
        buffer = cached.buffer
        if len(buffer) != cached.length:  # another history with this start extended it
            buffer = buffer[: cached.length]
        if messages:
            if buffer:
                buffer += b","
            buffer += json_items(messages)
        if closed:
            self._cache.put(history[0], _Encoded(len(history), history[-1], buffer))
        return buffer

    def _encode_all(self, history: tuple[Content, ...]) -> bytes | bytearray:
        messages, closed = self._convert(history)
        items = json_items(messages)
        if not closed:
            return items
        buffer = bytearray(items)
        self._cache.put(history[0], _Encoded(len(history), history[-1], buffer))
        return buffer
