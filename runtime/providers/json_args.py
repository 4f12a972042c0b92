"""Parsing accumulated tool-call argument text, with a strict repair for truncation.

A tool runs only with complete, parsed arguments, so parsing is strict: the
text must be a JSON object (empty text and ``null`` mean "no arguments").
The one repair offered is for a stream cut off by the token limit: when the
text is a prefix of a JSON object whose only missing pieces are closing
quotes and brackets (plus a dangling comma or half-written escape), closing
them gives exactly one reading. Anything else (a half-written key, a
value-less ``"key":``, a partial ``tru``) has no unique completion and is
reported as unrepairable.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["ArgumentsError", "parse_arguments", "repair_truncated_object"]


class ArgumentsError(ValueError):
    """Argument text that is not (and cannot be made into) a JSON object."""


def _loads_object(text: str) -> dict[str, Any]:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ArgumentsError(f"arguments are not valid JSON ({exc})") from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ArgumentsError(f"arguments are a JSON {type(value).__name__}, not an object")
    return value


def parse_arguments(text: str, *, allow_repair: bool = False) -> tuple[dict[str, Any], bool]:
    """``(args, repaired)``; raises ``ArgumentsError`` when no object can be had."""
    if not text or text.isspace():
        return {}, False
    try:
        return _loads_object(text), False
    except ArgumentsError:
        if not allow_repair:
            raise
        fixed = repair_truncated_object(text)
        if fixed is None:
            raise
        return fixed, True


def repair_truncated_object(text: str) -> dict[str, Any] | None:
    """Close a truncated JSON object where that is unambiguous; ``None`` otherwise."""
    s = text.rstrip()
    if not s.startswith("{"):
        return None
    closers: list[str] = []
    in_string = False
    escape_start = escape_end = -1  # the backslash escape being read, inside a string
    for i, ch in enumerate(s):
        if in_string:
            if escape_end >= 0:
                if i == escape_start + 1 and ch == "u":
                    escape_end = escape_start + 5
                if i >= escape_end:
                    escape_start = escape_end = -1
            elif ch == "\\":
                escape_start, escape_end = i, i + 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            closers.append("}")
        elif ch == "[":
            closers.append("]")
        elif ch in "}]":
            if not closers or closers.pop() != ch:
                return None
            if not closers and i != len(s) - 1:
                return None  # trailing garbage after the object: not a truncation
    if not closers:
        return None  # nothing is open, so the text is invalid rather than truncated
    tail = s
    if in_string:
        if escape_start >= 0:
            tail = tail[:escape_start]  # drop a half-written escape such as "\" or "\u00"
        tail += '"'
    tail = tail.rstrip()
    tail = tail.removesuffix(",")
    candidate = tail + "".join(reversed(closers))
    try:
        value = orjson.loads(candidate)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
