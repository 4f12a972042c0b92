"""Every frame a live daemon session has sent, kept for a client that attaches later.

A client that loads a session (or reconnects mid-turn) must get everything
before it, so the frames stay for as long as the session is live. Most of
them belong to finished turns and are only ever read again by such a
replay, so a finished turn's frames are kept as one zlib-compressed block:
ACP frames are repetitive JSON and shrink several times, and a long
session's memory grows by that much less. The running turn's frames stay
as they are, so fanning out and replaying stay cheap while it runs.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

__all__ = ["FrameHistory"]

_SEPARATOR = b"\n"
"""Compact JSON (what every frame is) never holds a raw newline, so it can join frames."""

_LEVEL = 1
"""The fastest level: finished turns are sealed on the emitting thread, and level 1
already takes most of what compression gives for JSON."""


class FrameHistory:
    """Frames in the order they were sent; not thread-safe (its session holds a lock)."""

    def __init__(self) -> None:
        self._sealed: list[bytes] = []
        self._open: list[bytes] = []
        self._open_bytes = 0
        self._sealed_bytes = 0

    def append(self, frame: bytes) -> None:
        if _SEPARATOR in frame:
            raise ValueError("a frame must be compact JSON, without raw newlines")
        self._open.append(frame)
        self._open_bytes += len(frame)

    def seal(self) -> None:
        """A turn ended: keep its frames compressed from now on."""
        if not self._open:
            return
        block = zlib.compress(_SEPARATOR.join(self._open), _LEVEL)
        self._sealed.append(block)
        self._sealed_bytes += len(block)
        self._open.clear()
        self._open_bytes = 0

    def __iter__(self) -> Iterator[bytes]:
        for block in self._sealed:
            yield from zlib.decompress(block).split(_SEPARATOR)
        yield from self._open

    @property
    def stored_bytes(self) -> int:
        """What the frames take here (compressed blocks plus the open turn's frames)."""
        return self._sealed_bytes + self._open_bytes
