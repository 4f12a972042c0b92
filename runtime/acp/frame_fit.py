"""Cut an outgoing message that would be bigger than the connection's message limit.

Every peer of this agent reads messages up to one limit (``--max-message-bytes``,
8 MiB by default): ``toolprep acp``'s editor, ``toolprep connect`` and the
daemon all use the same number. A frame over it used to be sent whole, and
the reader on the other side dropped it or closed the connection: the model
writing a 9 MB file made a card too big for ``connect``, and the session could
never be loaded through it again, since its replay carried that card too.

So the connection checks each ``session/update`` and permission request it
sends (live, or replayed from the store) against its limit, and one over it
is cut before it is written: its longest strings (a file's content in
``rawInput``, a tool's output, a diff's text) are shortened, each ending in a
note that says how much was left out, and the card's ``_meta.toolprep.truncated``
gives the frame's original size and the limit. The store keeps the frame
whole: a client with a larger limit still gets all of it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any, Final

import orjson

__all__ = ["FITTED_METHODS", "fit_message", "message_size"]

FITTED_METHODS: Final = {
    "session/update": ("update",),
    "session/request_permission": ("toolCall",),
}
"""The messages that may be cut, and where in their ``params`` the card to mark is. Anything
else (a response, a request carrying a file to write) is never altered here."""

_MAX_ROUNDS: Final = 16
_SLACK: Final = 256
"""Bytes cut beyond the excess, so that the note and the marker fit in the same round."""


def message_size(encoded: bytes) -> int:
    """An encoded message's size as the reader counts it: without a line's newline."""
    return len(encoded) - 1 if encoded.endswith(b"\n") else len(encoded)


def _note(cut_bytes: int, limit: int) -> str:
    return (
        f"\n[... {cut_bytes} bytes cut here: the message was over the {limit}-byte "
        "message limit ...]"
    )


def fit_message(
    message: dict[str, Any], encoded: bytes, limit: int, encode: Callable[[Any], bytes]
) -> bytes | None:
    """``message`` re-encoded to fit ``limit`` bytes, or None when it may not be cut.

    ``encoded`` is the message as it would go out (over the limit); ``encode``
    is the transport's encoder. The message itself is not changed.
    """
    method = message.get("method")
    where = FITTED_METHODS.get(method) if isinstance(method, str) else None
    params = message.get("params")
    if where is None or not isinstance(params, dict):
        return None
    original = message_size(encoded)
    fitted = copy.copy(message)
    fitted["params"] = params = _decoded(params)
    card = params.get(where[0])
    if not isinstance(card, dict):
        return None
    meta = card.setdefault("_meta", {})
    if not isinstance(meta, dict):
        return None
    ours = meta.setdefault("toolprep", {})
    if not isinstance(ours, dict):
        return None
    ours["truncated"] = {"originalBytes": original, "limitBytes": limit}
    data = encode(fitted)
    for _ in range(_MAX_ROUNDS):
        if message_size(data) <= limit:
            return data
        if not _cut_longest(card, message_size(data) - limit + _SLACK, limit):
            return None
        data = encode(fitted)
    return data if message_size(data) <= limit else None


def _decoded(params: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``params`` with any pre-encoded part (``orjson.Fragment``) decoded."""
    return orjson.loads(orjson.dumps(params))  # type: ignore[no-any-return]


def _strings(node: Any) -> Iterator[tuple[dict[str, Any] | list[Any], str | int, str]]:
    """Every string value under ``node``, with its container and key."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, str):
                yield node, key, value
            else:
                yield from _strings(value)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            if isinstance(value, str):
                yield node, index, value
            else:
                yield from _strings(value)


def _cut_longest(card: dict[str, Any], excess: int, limit: int) -> bool:
    """Shorten the longest string under ``card`` by at least ``excess`` encoded bytes, or as
    much as it has; False when there is nothing left worth cutting."""
    found = max(_strings(card), key=lambda item: len(item[2]), default=None)
    if found is None or len(found[2]) <= _SLACK:
        return False
    container, key, text = found
    size = len(orjson.dumps(text))
    per_char = size / len(text)
    keep_chars = max(0, len(text) - int(excess / per_char) - 1 - len(_note(size, limit)))
    kept = text[:keep_chars]
    cut_bytes = len(text.encode("utf-8", errors="surrogatepass")) - len(
        kept.encode("utf-8", errors="surrogatepass")
    )
    container[key] = kept + _note(cut_bytes, limit)  # type: ignore[index]
    return True
