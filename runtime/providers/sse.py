"""Incremental Server-Sent Events decoder: raw body bytes in, ``(event, data)`` out.

We decode SSE ourselves instead of using the SDKs' typed streams because
those build a pydantic object per event, which costs more than the whole
rest of our per-event work. The decoder follows the WHATWG event-stream
rules that matter for model APIs:

- lines end in LF, CRLF or CR, and a CRLF split across two network reads
  still counts as one line ending;
- ``data:`` lines accumulate (joined with ``\\n``), ``event:`` names the event,
  one optional space after the colon is dropped, a line starting with ``:``
  is a comment, ``id``/``retry`` and unknown fields are ignored;
- a blank line dispatches the event when it has data; the event name resets
  after each dispatch;
- a leading UTF-8 BOM is skipped.

Unlike the browser algorithm, ``end()`` also dispatches a final event that
was not followed by a blank line: several real servers close the stream
right after the last ``data:`` line, and dropping that event would lose the
terminal marker.
"""

from __future__ import annotations

from typing import TypeAlias

__all__ = ["SseDecoder", "SseEvent", "decode_sse"]

SseEvent: TypeAlias = tuple[str | None, str]
"""``(event name or None, data)`` for one dispatched event."""

_BOM = b"\xef\xbb\xbf"


class SseDecoder:
    """Feed body chunks with ``feed``; call ``end`` once at EOF.

    Holds only an unfinished line and the event being assembled between
    calls, so memory stays bounded by the largest single event.
    """

    __slots__ = ("_data", "_event", "_partial", "_skip_lf", "_started")

    def __init__(self) -> None:
        self._partial = b""
        self._data: list[bytes] = []
        self._event: str | None = None
        self._skip_lf = False
        self._started = False

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Decode one chunk of the body; returns the events it completed."""
        if not chunk:
            return []
        if not self._started:
            if len(self._partial) + len(chunk) < 3 and _BOM.startswith(self._partial + chunk):
                self._partial += chunk
                return []
            chunk = self._partial + chunk
            self._partial = b""
            self._started = True
            if chunk.startswith(_BOM):
                chunk = chunk[3:]
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
                if not chunk:
                    return []
        buf = self._partial + chunk if self._partial else chunk
        lines = buf.splitlines()
        last = buf[-1]
        if last == 0x0A:  # "\n"
            self._partial = b""
        elif last == 0x0D:  # "\r": a following "\n" belongs to this line ending
            self._partial = b""
            self._skip_lf = True
        else:
            self._partial = lines.pop()
        out: list[SseEvent] = []
        for line in lines:
            self._line(line, out)
        return out

    def end(self) -> list[SseEvent]:
        """Flush at EOF: the unfinished last line, then a pending event without its blank line."""
        out: list[SseEvent] = []
        if not self._started and self._partial:
            self._started = True
            if self._partial.startswith(_BOM):
                self._partial = self._partial[3:]
        if self._partial:
            line, self._partial = self._partial, b""
            self._line(line, out)
        self._line(b"", out)
        return out

    def _line(self, line: bytes, out: list[SseEvent]) -> None:
        if not line:
            if self._data:
                data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
                out.append((self._event, data.decode("utf-8", "replace")))
                self._data = []
            self._event = None
            return
        if line[0] == 0x3A:  # ":" comment
            return
        colon = line.find(b":")
        if colon < 0:
            field, value = line, b""
        else:
            field = line[:colon]
            value = line[colon + 2 :] if line[colon + 1 : colon + 2] == b" " else line[colon + 1 :]
        if field == b"data":
            self._data.append(value)
        elif field == b"event":
            self._event = value.decode("utf-8", "replace") or None


def decode_sse(body: bytes | str) -> list[SseEvent]:
    """Decode a whole SSE body at once (tests, benchmarks, replay scripts)."""
    decoder = SseDecoder()
    raw = body.encode("utf-8") if isinstance(body, str) else body
    return decoder.feed(raw) + decoder.end()
