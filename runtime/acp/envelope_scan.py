"""Find a JSON-RPC message's ``id`` and kind without holding the message.

A line over the connection's size limit is dropped unread, which used to
leave the local request it answered waiting for its timeout (an editor's
``fs/read_text_file`` reply carrying a large file, say). To fail that request
at once, the reader needs the reply's ``id``, which may sit anywhere in the
object, even after megabytes of ``result``. This scanner walks the top level
of one JSON object fed in pieces, in constant memory: it remembers the
top-level keys it has met and the raw text of the ``id`` value, and skips
everything nested (strings included) with regular-expression jumps rather
than byte by byte.

It validates only what it needs: anything that stops looking like a single
JSON object makes it give up (``invalid``), and the caller then treats the
line as the plain oversized garbage it was before.
"""

from __future__ import annotations

import re
from typing import Final, Literal, assert_never

import orjson

Phase = Literal[
    "before",  # leading whitespace, then "{"
    "expect_key",  # after "{" or ","
    "in_key",
    "expect_colon",
    "expect_value",
    "in_string_value",
    "in_scalar",
    "nested",  # inside an object or array value
    "expect_comma",
    "end",  # after the closing "}"
    "invalid",
]

_WHITESPACE: Final = re.compile(rb"[ \t\r\n]*")
# A string body up to its closing quote: runs of plain bytes and escape pairs.
_STRING_BODY: Final = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*', re.DOTALL)
_NESTED_STOP: Final = re.compile(rb'["{}\[\]]')
_SCALAR_BODY: Final = re.compile(rb"[^,}\s]*")
_BACKSLASH: Final = ord("\\")
_KEEP_BYTES: Final = 64  # of a key or of the id's text; longer ones are not ours


class EnvelopeScanner:
    """Feed one line's bytes in any split; then ask ``may_be_response`` / ``response_id``."""

    def __init__(self) -> None:
        self._phase: Phase = "before"
        self._escape_pending = False  # a backslash ended the last piece inside a string
        self._depth = 0
        self._nested_in_string = False
        self._key = bytearray()
        self._value = bytearray()
        self._value_key = b""
        self._seen_key = False
        self._has_method = False
        self._id_text: bytes | None = None

    @property
    def may_be_response(self) -> bool:
        """False once this is surely not a response: not an object, or it has a ``method``."""
        return self._phase not in ("before", "invalid") and not self._has_method

    def response_id(self) -> int | None:
        """The integer ``id`` of a complete response object, else None."""
        if self._phase != "end" or self._has_method or self._id_text is None:
            return None
        try:
            value = orjson.loads(self._id_text)
        except orjson.JSONDecodeError:
            return None
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)  # no copy: the first piece can be the whole size limit
        pos, size = 0, len(view)
        while pos < size and self._phase != "invalid":
            pos = self._step(view, pos)

    def _step(self, data: memoryview, pos: int) -> int:
        """Advance through ``data`` from ``pos`` by one token or jump; return the new position."""
        match self._phase:
            case "before" | "expect_key" | "expect_colon" | "expect_value" | "expect_comma" | "end":
                pos = _WHITESPACE.match(data, pos).end()  # type: ignore[union-attr]
                if pos < len(data) and self._punctuation(bytes(data[pos : pos + 1])):
                    pos += 1
                return pos
            case "in_key":
                return self._string(data, pos, self._key)
            case "in_string_value":
                return self._string(data, pos, self._value)
            case "in_scalar":
                end = _SCALAR_BODY.match(data, pos).end()  # type: ignore[union-attr]
                self._keep(self._value, data[pos:end])
                if end < len(data):
                    self._finish_value()
                return end
            case "nested":
                return self._nested(data, pos)
            case "invalid":
                return len(data)
            case _:
                assert_never(self._phase)

    def _punctuation(self, char: bytes) -> bool:
        """Take one structural byte; False when it is not consumed (a scalar's first byte)."""
        match self._phase, char:
            case "before", b"{":
                self._phase = "expect_key"
            case "expect_key", b'"':
                self._key.clear()
                self._phase = "in_key"
            case "expect_key", b"}" if not self._seen_key:
                self._phase = "end"
            case "expect_colon", b":":
                self._value_key = bytes(self._key)
                self._seen_key = True
                self._has_method = self._has_method or self._value_key == b"method"
                self._value.clear()
                self._phase = "expect_value"
            case "expect_value", b'"':
                self._value += char
                self._phase = "in_string_value"
            case "expect_value", b"{" | b"[":
                self._depth, self._nested_in_string = 1, False
                self._phase = "nested"
            case "expect_value", _ if char not in b",}]:":
                self._phase = "in_scalar"
                return False
            case "expect_comma", b",":
                self._phase = "expect_key"
            case "expect_comma", b"}":
                self._phase = "end"
            case _:
                self._phase = "invalid"
        return True

    def _string(self, data: memoryview, pos: int, keep: bytearray) -> int:
        if self._escape_pending:
            self._escape_pending = False
            self._keep(keep, data[pos : pos + 1])
            pos += 1
        end = _STRING_BODY.match(data, pos).end()  # type: ignore[union-attr]
        self._keep(keep, data[pos:end])
        if end == len(data):
            return end
        if data[end] == _BACKSLASH:  # an escape cut by the end of this piece
            self._keep(keep, b"\\")
            self._escape_pending = True
            return end + 1
        if self._phase == "in_key":
            self._phase = "expect_colon"
        else:
            self._keep(keep, b'"')
            self._finish_value()
        return end + 1

    def _nested(self, data: memoryview, pos: int) -> int:
        if self._nested_in_string:
            if self._escape_pending:
                self._escape_pending = False
                pos += 1
            end = _STRING_BODY.match(data, pos).end()  # type: ignore[union-attr]
            if end == len(data):
                return end
            if data[end] == _BACKSLASH:
                self._escape_pending = True
                return end + 1
            self._nested_in_string = False
            return end + 1
        found = _NESTED_STOP.search(data, pos)
        if found is None:
            return len(data)
        char = bytes(data[found.start() : found.start() + 1])
        if char == b'"':
            self._nested_in_string = True
        elif char in (b"{", b"["):
            self._depth += 1
        else:
            self._depth -= 1
            if self._depth == 0:
                self._finish_value()
        return found.end()

    def _finish_value(self) -> None:
        if self._value_key == b"id":
            self._id_text = bytes(self._value) if len(self._value) <= _KEEP_BYTES else None
        self._phase = "expect_comma"

    @staticmethod
    def _keep(keep: bytearray, piece: bytes | memoryview) -> None:
        """Append while under the bound; one byte past it marks the text as too long."""
        room = _KEEP_BYTES + 1 - len(keep)
        if room > 0:
            keep += piece[:room]
