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
    scan = _Scanner()
    if not scan.scan(s) or not scan.closers:
        return None  # broken, or nothing left open: invalid rather than truncated
    try:
        value = orjson.loads(_closed(s, scan))
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


class _Scanner:
    """Reads a JSON prefix for what is left open: brackets, a string, an escape in it."""

    __slots__ = ("closers", "escape_end", "escape_start", "in_string")

    def __init__(self) -> None:
        self.closers: list[str] = []
        self.in_string = False
        self.escape_start = -1  # the backslash escape being read, inside a string
        self.escape_end = -1

    def scan(self, s: str) -> bool:
        """False when ``s`` cannot be the start of one object (a bracket closed wrongly,
        or text after the object closed)."""
        last = len(s) - 1
        for i, ch in enumerate(s):
            if self.in_string:
                self._string_char(i, ch)
            elif not self._structural_char(i, ch, last):
                return False
        return True

    def _string_char(self, i: int, ch: str) -> None:
        if self.escape_end >= 0:
            if i == self.escape_start + 1 and ch == "u":
                self.escape_end = self.escape_start + 5
            if i >= self.escape_end:
                self.escape_start = self.escape_end = -1
        elif ch == "\\":
            self.escape_start, self.escape_end = i, i + 1
        elif ch == '"':
            self.in_string = False

    def _structural_char(self, i: int, ch: str, last: int) -> bool:
        closers = self.closers
        if ch == '"':
            self.in_string = True
        elif ch == "{":
            closers.append("}")
        elif ch == "[":
            closers.append("]")
        elif ch in "}]":
            if not closers or closers.pop() != ch:
                return False
            if not closers and i != last:
                return False  # trailing garbage after the object: not a truncation
        return True


def _closed(s: str, scan: _Scanner) -> str:
    """``s`` with its open string ended (a half-written escape dropped), a dangling comma
    dropped and the open brackets closed."""
    tail = s
    if scan.in_string:
        if scan.escape_start >= 0:
            tail = tail[: scan.escape_start]  # drop a half-written escape such as "\" or "\u00"
        tail += '"'
    tail = tail.rstrip().removesuffix(",")
    return tail + "".join(reversed(scan.closers))
