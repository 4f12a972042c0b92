"""Newline-delimited JSON on a pair of blocking byte streams: an ACP agent's stdio.

The input is read in bounded chunks and split into lines here, so a
multi-gigabyte line costs at most ``max_message_bytes`` of memory before it
is skipped. A skipped line that may be the peer's *response* is scanned to
its end (``envelope_scan``, constant memory) for the id it answers.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Final

import orjson

from toolprep.runtime.acp.envelope_scan import EnvelopeScanner
from toolprep.runtime.acp.transport import SkippedMessage

__all__ = ["LineTransport"]

logger = logging.getLogger(__name__)

_READ_CHUNK_BYTES: Final = 64 * 1024


@dataclass(slots=True)
class _Overflow:
    """The line being skipped; ``scanner`` is dropped once it cannot be a response."""

    size: int
    scanner: EnvelopeScanner | None


class LineTransport:
    """One compact JSON object per line; the output is flushed after each message."""

    def __init__(self, input_stream: IO[bytes], output_stream: IO[bytes], max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError("max_line_bytes must be positive")
        self._input = input_stream
        self._output = output_stream
        self.max_message_bytes = max_bytes

    def encode(self, message: Mapping[str, Any]) -> bytes:
        return orjson.dumps(message, option=orjson.OPT_APPEND_NEWLINE)

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[self._output.write(view) :]
        self._output.flush()

    def write_many(self, messages: Sequence[bytes]) -> None:
        """Each message ends in its newline, so they go out as one write and one flush."""
        self.write(messages[0] if len(messages) == 1 else b"".join(messages))

    def close_output(self) -> None:
        """Close the output, dropping whatever it still buffers.

        Otherwise interpreter shutdown retries the flush of ``sys.stdout``,
        fails again and turns a clean exit into status 120. The input is left
        to the reader, which exits at EOF: closing a stream another thread is
        blocked reading is not safe.
        """
        with contextlib.suppress(OSError, ValueError):
            self._output.close()

    def incoming(self) -> Iterator[bytes | SkippedMessage]:
        """Complete lines without their newline, and a ``SkippedMessage`` for each over the limit.

        A line is buffered only while it fits the limit; past that the buffer
        is dropped and the rest of the line is skipped as it arrives. A line
        that cannot be a response is reported at once; one that may be is
        scanned to its end for the ``id`` it answers.
        """
        limit = self.max_message_bytes
        buffer = bytearray()
        overflow: _Overflow | None = None
        while True:
            chunk = self._read_chunk()
            if not chunk:
                if overflow is not None:
                    yield from _overflow_verdict(overflow)
                elif buffer:
                    yield bytes(buffer)  # a last line without a newline still counts
                return
            start = 0
            while True:
                newline = chunk.find(b"\n", start)
                end = len(chunk) if newline == -1 else newline
                if overflow is not None:
                    overflow.size += end - start
                    if overflow.scanner is not None:
                        overflow.scanner.feed(memoryview(chunk)[start:end])
                        if not overflow.scanner.may_be_response:
                            overflow.scanner = None
                            yield SkippedMessage()
                elif len(buffer) + end - start > limit:
                    scanner = EnvelopeScanner()
                    scanner.feed(buffer)
                    scanner.feed(memoryview(chunk)[start:end])
                    overflow = _Overflow(size=len(buffer) + end - start, scanner=scanner)
                    buffer.clear()
                    if not scanner.may_be_response:
                        overflow.scanner = None
                        yield SkippedMessage()
                else:
                    buffer += chunk[start:end]
                if newline == -1:
                    break
                if overflow is not None:
                    yield from _overflow_verdict(overflow)
                else:
                    yield bytes(buffer)
                buffer.clear()
                overflow = None
                start = newline + 1

    def _read_chunk(self) -> bytes:
        """At most one chunk of whatever is available; never waits to fill a buffer."""
        read1 = getattr(self._input, "read1", None)
        try:
            chunk = (
                read1(_READ_CHUNK_BYTES)
                if read1 is not None
                else self._input.read(_READ_CHUNK_BYTES)
            )
        except (OSError, ValueError) as exc:
            logger.warning("input unreadable, treating as EOF: %s", exc)
            return b""
        return bytes(chunk) if chunk else b""


def _overflow_verdict(overflow: _Overflow) -> Iterator[SkippedMessage]:
    """At the end of a skipped line: its verdict, unless it was reported already."""
    if overflow.scanner is not None:
        yield SkippedMessage(size=overflow.size, response_id=overflow.scanner.response_id())
