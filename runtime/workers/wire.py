"""Frames on the pipes between the front and a worker.

A frame is a 4-byte big-endian length, then a JSON header (an object whose
``type`` names the message, ``protocol``), a newline, and an optional raw payload. Session
updates travel as that payload: the worker serialises an update once and the
front hands the same bytes to the editor connection, never decoding them.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Iterable
from typing import IO, Any

import orjson

__all__ = [
    "MAX_FRAME_BYTES",
    "FrameReader",
    "FrameWriter",
    "WireError",
    "encode_frame",
    "encode_frames",
]

MAX_FRAME_BYTES = 256 * 1024 * 1024
"""Far above any legitimate frame (editor messages are capped well below it): a length
beyond it means the stream is corrupt, not that a big frame is coming."""

_LENGTH = struct.Struct(">I")


class WireError(Exception):
    """The pipe carried something that is not a frame: the peer is broken."""


def encode_frame(header: dict[str, Any], payload: bytes = b"") -> bytes:
    body = orjson.dumps(header) + b"\n" + payload
    return _LENGTH.pack(len(body)) + body


def encode_frames(frames: Iterable[tuple[dict[str, Any], bytes]]) -> bytes:
    """Several frames back to back, to be written at once: a reader takes them one by one."""
    return b"".join(encode_frame(header, payload) for header, payload in frames)


class FrameReader:
    """Reads frames from a blocking binary stream; ``None`` at a clean end of stream."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream

    def read(self) -> tuple[dict[str, Any], bytes] | None:
        prefix = self._read_exactly(_LENGTH.size)
        if prefix is None:
            return None
        (length,) = _LENGTH.unpack(prefix)
        if length > MAX_FRAME_BYTES:
            raise WireError(f"frame of {length} bytes announced; the stream is corrupt")
        body = self._read_exactly(length)
        if body is None:
            raise WireError("the stream ended inside a frame")
        end = body.find(b"\n")
        if end < 0:
            raise WireError("a frame without a header")
        try:
            header = orjson.loads(body[:end])
        except orjson.JSONDecodeError as exc:
            raise WireError(f"a frame header that is not JSON: {exc}") from None
        if not isinstance(header, dict) or not isinstance(header.get("type"), str):
            raise WireError(f"a frame header that names no frame: {header!r}")
        return header, body[end + 1 :]

    def _read_exactly(self, size: int) -> bytes | None:
        data = self._stream.read(size)
        if not data:
            return None
        while len(data) < size:
            more = self._stream.read(size - len(data))
            if not more:
                raise WireError("the stream ended inside a frame")
            data += more
        return data


class FrameWriter:
    """Writes whole frames from any thread; frames never interleave."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = threading.Lock()

    def write(self, header: dict[str, Any], payload: bytes = b"") -> None:
        self.write_encoded(encode_frame(header, payload))

    def write_encoded(self, frame: bytes) -> None:
        view = memoryview(frame)
        with self._lock:
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
