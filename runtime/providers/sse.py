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

Decoding is linear in the body size whatever the read boundaries: each
``feed`` scans only the bytes it was given, and an unfinished line waits in
a growing ``bytearray`` that is joined once, when its line ending arrives.
(Re-scanning "unfinished line + new chunk" on every read made one long
line cost quadratic time: 80 MiB took about a minute of CPU.) The event
being assembled is capped at ``max_event_bytes``, because a server that
never ends an event would otherwise hold the whole stream in memory.
"""

from __future__ import annotations

from typing import Final, TypeAlias

from toolprep.runtime.providers.errors import event_too_large

__all__ = ["DEFAULT_MAX_EVENT_BYTES", "SseDecoder", "SseEvent", "decode_sse"]

SseEvent: TypeAlias = tuple[str | None, str]
"""``(event name or None, data)`` for one dispatched event."""

DEFAULT_MAX_EVENT_BYTES: Final = 8 * 1024 * 1024
"""Far above any real model event (a whole tool argument is one JSON line),
far below what would hurt the process."""

_BOM = b"\xef\xbb\xbf"


class SseDecoder:
    """Feed body chunks with ``feed``; call ``end`` once at EOF.

    Holds only an unfinished line and the event being assembled between
    calls. Their size, counted as the event's ``data`` lines so far (one
    byte each for the line ending) plus the line being read, may not exceed
    ``max_event_bytes``; ``feed`` raises a final ``StreamError`` of kind
    ``event_too_large`` as soon as it would, before holding more.
    ``scanned_bytes`` counts the bytes searched for line endings; it equals
    the bytes fed, which is what keeps decoding linear.
    """

    __slots__ = (
        "_data",
        "_event",
        "_event_bytes",
        "_limit",
        "_partial",
        "_scanned",
        "_skip_lf",
        "_started",
    )

    def __init__(self, *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        if max_event_bytes <= 0:
            raise ValueError(f"max_event_bytes must be positive, got {max_event_bytes}")
        self._limit = max_event_bytes
        self._partial = bytearray()
        self._data: list[bytes] = []
        self._event_bytes = 0
        self._event: str | None = None
        self._skip_lf = False
        self._started = False
        self._scanned = 0

    @property
    def max_event_bytes(self) -> int:
        return self._limit

    @property
    def scanned_bytes(self) -> int:
        return self._scanned

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Decode one chunk of the body; returns the events it completed."""
        if not chunk:
            return []
        if not self._started:
            if len(self._partial) + len(chunk) < 3 and _BOM.startswith(self._partial + chunk):
                self._partial += chunk
                return []
            chunk = bytes(self._partial) + chunk  # at most two bytes held back
            self._partial.clear()
            self._started = True
            if chunk.startswith(_BOM):
                chunk = chunk[3:]
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
                if not chunk:
                    return []
        self._scanned += len(chunk)
        lines = chunk.splitlines()
        tail: bytes | None = None
        last = chunk[-1]
        if last == 0x0D:  # "\r": a following "\n" belongs to this line ending
            self._skip_lf = True
        elif last != 0x0A:  # "\n"
            tail = lines.pop()
        out: list[SseEvent] = []
        if lines:
            if self._partial:  # the first line ending in this chunk finishes the held line
                lines[0] = bytes(self._partial) + lines[0]
                self._partial.clear()
            for line in lines:
                self._line(line, out)
        if tail is not None:
            self._hold(tail)
        return out

    def end(self) -> list[SseEvent]:
        """Flush at EOF: the unfinished last line, then a pending event without its blank line."""
        out: list[SseEvent] = []
        line = bytes(self._partial)
        self._partial.clear()
        if not self._started:
            self._started = True
            if line.startswith(_BOM):
                line = line[3:]
        if line:
            self._line(line, out)
        self._line(b"", out)
        return out

    def _hold(self, piece: bytes) -> None:
        """Keep the unfinished tail of a chunk for the next ``feed``, within the event cap."""
        if self._event_bytes + len(self._partial) + len(piece) > self._limit:
            raise event_too_large(self._limit)
        self._partial += piece

    def _line(self, line: bytes, out: list[SseEvent]) -> None:
        if not line:
            if self._data:
                data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
                out.append((self._event, data.decode("utf-8", "replace")))
                self._data = []
                self._event_bytes = 0
            self._event = None
            return
        if self._event_bytes + len(line) > self._limit:
            raise event_too_large(self._limit)
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
            self._event_bytes += len(line) + 1
        elif field == b"event":
            self._event = value.decode("utf-8", "replace") or None


def decode_sse(
    body: bytes | str, *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
) -> list[SseEvent]:
    """Decode a whole SSE body at once (tests, benchmarks, replay scripts)."""
    decoder = SseDecoder(max_event_bytes=max_event_bytes)
    raw = body.encode("utf-8") if isinstance(body, str) else body
    return decoder.feed(raw) + decoder.end()
