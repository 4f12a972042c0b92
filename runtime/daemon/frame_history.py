"""A live daemon session's frame log in memory: a cache of its log, for clients that attach.

A client that loads a session (or reconnects mid-turn) must get everything
before it, or everything after the last frame it saw (``after``: frames
carry their number in the session's log, ``_meta.toolprep.seq``, given by
the journal that stores them, or that only numbers them when the daemon
keeps no store: this copy is the log then), so the frames stay for as long as the
session is live. Most of them belong to finished turns and are only ever
read again by such a replay, so a finished turn's frames are kept as one
zlib-compressed block: ACP frames are repetitive JSON and shrink several
times, and a long session's memory grows by that much less. The running
turn's frames stay as they are, so fanning out and replaying stay cheap
while it runs.

A frame without a number (a gap mark a replay from the store adds) sits
after the numbered frame before it: a replay after that frame includes it.

With a store behind the session the cache is bounded: past a budget, the
oldest finished turns whose frames the store holds are forgotten
(``forget_stored``), and a replay that reaches back before what is kept reads
that part from the store (``forgotten_through`` says where it ends). A session
that runs for thousands of turns then costs its last turns' frames, not all of
them; without a store this copy is the log and nothing is forgotten.
"""

from __future__ import annotations

import zlib
from array import array
from collections.abc import Iterator
from dataclasses import dataclass

from toolprep.messages.frames import seq_of_encoded

__all__ = ["FrameHistory"]

_SEPARATOR = b"\n"
"""Compact JSON (what every frame is) never holds a raw newline, so it can join frames."""

_LEVEL = 1
"""The fastest level: finished turns are sealed on the emitting thread, and level 1
already takes most of what compression gives for JSON."""


@dataclass(frozen=True, slots=True)
class _Block:
    data: bytes
    places: array[int]


class FrameHistory:
    """Frames in the order they were sent; not thread-safe (its session holds a lock).

    Each frame has a place: ``2 * seq`` for frame ``seq``, one more than the
    numbered frame before it for a frame without a number. A replay after
    frame ``n`` is every frame placed past ``2 * n``.
    """

    def __init__(self) -> None:
        self._sealed: list[_Block] = []
        self._open: list[bytes] = []
        self._places: array[int] = array("q")
        self._last_place = 0
        self._open_bytes = 0
        self._sealed_bytes = 0
        self._forgotten_through = 0

    def append(self, frame: bytes) -> None:
        if _SEPARATOR in frame:
            raise ValueError("a frame must be compact JSON, without raw newlines")
        seq = seq_of_encoded(frame)
        place = 2 * seq if seq is not None else self._last_place | 1
        self._last_place = max(self._last_place, place)
        self._open.append(frame)
        self._places.append(place)
        self._open_bytes += len(frame)

    def seal(self) -> None:
        """A turn ended: keep its frames compressed from now on."""
        if not self._open:
            return
        block = _Block(zlib.compress(_SEPARATOR.join(self._open), _LEVEL), self._places)
        self._sealed.append(block)
        self._sealed_bytes += _size(block)
        self._open.clear()
        self._places = array("q")
        self._open_bytes = 0

    def forget_stored(self, budget_bytes: int, stored_seq: int) -> None:
        """Drop the oldest finished turns while the finished ones take more than
        ``budget_bytes``, each only if every number in it is ``stored_seq`` or lower (the
        store holds it, or has its gap mark, and a replay can read it back from there)."""
        while self._sealed and self._sealed_bytes > budget_bytes:
            oldest = self._sealed[0]
            if not 2 <= oldest.places[-1] <= 2 * stored_seq + 1:
                return  # unnumbered frames (no store numbered them), or not all stored yet
            self._sealed.pop(0)
            self._sealed_bytes -= _size(oldest)
            self._forgotten_through = max(self._forgotten_through, oldest.places[-1] // 2)

    @property
    def forgotten_through(self) -> int:
        """The number of the last frame forgotten: a replay of frames up to it reads them from
        the store; 0 while nothing is."""
        return self._forgotten_through

    @property
    def last_seq(self) -> int:
        """The number of the last numbered frame kept; 0 if none is."""
        return self._last_place // 2

    def after(self, after_seq: int) -> Iterator[bytes]:
        """The frames a client that saw frame ``after_seq`` lacks, in order."""
        # Frames without numbers only (from a runtime that did not number them): a number
        # the client holds cannot come from this log, so it gets all of it.
        past = 2 * after_seq if self._last_place >= 2 else -2
        for block in self._sealed:
            if block.places[-1] <= past:
                continue
            for place, frame in zip(
                block.places, zlib.decompress(block.data).split(_SEPARATOR), strict=True
            ):
                if place > past:
                    yield frame
        for place, frame in zip(self._places, self._open, strict=True):
            if place > past:
                yield frame

    def __iter__(self) -> Iterator[bytes]:
        return self.after(-1)

    @property
    def sealed_bytes(self) -> int:
        """What the finished turns' compressed blocks take."""
        return self._sealed_bytes

    @property
    def kept_bytes(self) -> int:
        """What the frames take here (compressed blocks plus the open turn's frames)."""
        return self._sealed_bytes + self._open_bytes


def _size(block: _Block) -> int:
    return len(block.data) + block.places.itemsize * len(block.places)
