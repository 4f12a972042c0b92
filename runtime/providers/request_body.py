"""A model request's JSON body, serialised once, before the SDK sees it.

The SDKs' own ``create()`` walks the whole request (every message of a long
history) to transform it against their typed parameter schemas, copies it
per attempt and serialises it with the standard library's encoder. Our
parameter dicts are already in wire shape, so all of that is spent on a
no-op; orjson turns the same dict into the same JSON at a fraction of the
cost, and the bytes go through the SDK's public ``post(content=...)``,
which still adds auth, headers and base URL, retries and typed status
errors. Tests check that the body matches what ``create()`` sends.

orjson refuses integers beyond 64 bits, which a tool's JSON schema may
legitimately hold (``"maximum": 2**70``); such a body falls back to the
standard library encoder, as the SDK would have used.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import orjson

from toolprep.runtime.providers.base import StreamError, ToolDeclaration

__all__ = [
    "IdentityCache",
    "ToolsJson",
    "WeakIdentityCache",
    "encode_request_body",
    "stream_body",
]


def encode_request_body(params: Mapping[str, Any] | list[Any]) -> bytes:
    """``params`` (a body, or a piece of one) as compact UTF-8 JSON; a final
    ``invalid_request`` error if it is not JSON."""
    try:
        return orjson.dumps(params)
    except orjson.JSONEncodeError:
        pass
    try:
        return json.dumps(
            params, ensure_ascii=False, separators=(",", ":"), allow_nan=False
        ).encode()
    except (TypeError, ValueError) as exc:
        raise StreamError(
            f"the request cannot be sent: its body is not JSON ({exc})",
            retryable=False,
            kind="invalid_request",
        ) from exc


def stream_body(
    head: Mapping[str, Any], messages: Sequence[bytes | bytearray], tools: bytes | None
) -> bytes:
    """A streaming request's body from its pieces: the ``head`` fields (``model`` first, so
    the object is never empty), the ``messages`` items, the encoded ``tools``, ``stream``."""
    parts = [encode_request_body(head)[:-1], b',"messages":[', *messages, b"]"]
    if tools is not None:
        parts += (b',"tools":', tools)
    parts.append(b',"stream":true}')
    return b"".join(parts)


K = TypeVar("K")
V = TypeVar("V")


class IdentityCache(Generic[K, V]):
    """Values keyed by an object's identity, holding the object so its id is not reused.

    Bounded: past ``limit`` entries the least recently stored goes.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._entries: dict[int, tuple[K, V]] = {}

    def get(self, key: K) -> V | None:
        entry = self._entries.get(id(key))
        if entry is None or entry[0] is not key:
            return None
        return entry[1]

    def put(self, key: K, value: V) -> None:
        entries = self._entries
        entries.pop(id(key), None)
        entries[id(key)] = (key, value)
        if len(entries) > self._limit:
            del entries[next(iter(entries))]

    def __len__(self) -> int:
        return len(self._entries)


class WeakIdentityCache(Generic[K, V]):
    """Values keyed by an object's identity that live no longer than the object: an entry
    goes when nothing else holds its key (and, past ``limit`` entries, the least recently
    stored goes).

    For values that are large and only useful with their key: a session's encoded
    history, keyed by its first message, goes with the session (closed, or compacted
    into a history that starts anew) instead of waiting to be the oldest of ``limit``.
    An entry's removal may race with a store under the same key from another thread; the
    worst that costs is a miss.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._entries: dict[int, tuple[weakref.ref[Any], V]] = {}

    def get(self, key: K) -> V | None:
        entry = self._entries.get(id(key))
        if entry is None or entry[0]() is not key:
            return None
        return entry[1]

    def put(self, key: K, value: V) -> None:
        entries = self._entries
        ident = id(key)
        entries.pop(ident, None)
        entries[ident] = (weakref.ref(key, _forget_from(entries, ident)), value)
        if len(entries) > self._limit:
            del entries[next(iter(entries))]

    def __len__(self) -> int:
        return len(self._entries)


def _forget_from(
    entries: dict[int, tuple[weakref.ref[Any], Any]], ident: int
) -> Callable[[weakref.ref[Any]], None]:
    """The callback that removes ``ident``'s entry once its key is collected (not a newer
    entry under a reused id). It holds the table, not the cache."""

    def forget(ref: weakref.ref[Any]) -> None:
        entry = entries.get(ident)
        if entry is not None and entry[0] is ref:
            entries.pop(ident, None)

    return forget


class ToolsJson:
    """A request's tools, encoded once per tool set: a session declares the same tuple on
    every request, and an MCP server can bring thousands of tools."""

    def __init__(
        self, convert: Callable[[tuple[ToolDeclaration, ...]], list[dict[str, Any]]]
    ) -> None:
        self._convert = convert
        self._cache: IdentityCache[tuple[ToolDeclaration, ...], bytes] = IdentityCache(256)

    def get(self, tools: tuple[ToolDeclaration, ...]) -> bytes | None:
        """The JSON array of ``tools``; ``None`` for none (the field is left out)."""
        if not tools:
            return None
        encoded = self._cache.get(tools)
        if encoded is None:
            encoded = encode_request_body(self._convert(tools))
            self._cache.put(tools, encoded)
        return encoded
