"""Read credit: a session's stream is read only as fast as its frames are written.

The stream loop reads every session's provider stream and hands the chunks to the
tracker, whose frames go to the emitter; both roles serve every session, one message
after another. A stream that comes faster than those roles turn it into frames (a long
reply sent as fast as the network allows) would otherwise fill their mailboxes, and
every other session's chunks would queue behind it: one session's reply stalling all
the others for seconds. So each session may have at most ``limit`` chunks read and not
yet written (a chunk of much text counts as several: ``chunk_weight``); past that, its
stream's reading waits (the provider is held back by TCP) until the emitter has written
half of them. The others' chunks then wait behind at most ``limit`` of its chunks, and
each session gets its share of the roles, not all of them.

The credit is a bound on unfairness, never a condition of progress: a wait gives up
after ``max_wait_s`` (a role that crashed with chunks in its mailbox never gives their
credit back), and each attempt starts with a clean count.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Final

from toolprep.messages.content import GenerateContentResponse, TextPart, ThoughtPart

__all__ = ["DEFAULT_READ_CREDIT", "ReadCredit", "chunk_weight"]

DEFAULT_READ_CREDIT: Final = 512
"""Chunks a session may have in the roles' mailboxes: enough that a fast stream is never
held back by the hand-off's own latency, few enough (a few milliseconds of the roles'
work) that the others barely wait behind them."""

MAX_WAIT_S: Final = 1.0

WEIGHT_CHARACTERS: Final = 4096
"""A chunk counts once, and once more for each this many characters of text it carries: a
reply in a few huge chunks is paced by what the roles do with them, as one in many."""


def chunk_weight(chunk: GenerateContentResponse) -> int:
    """What a chunk takes of its session's credit."""
    characters = 0
    for part in chunk.parts:
        if isinstance(part, TextPart | ThoughtPart):
            characters += len(part.text)
    return 1 + characters // WEIGHT_CHARACTERS


class ReadCredit:
    """Chunks read and not yet written, per session; thread-safe."""

    def __init__(self, limit: int = DEFAULT_READ_CREDIT, max_wait_s: float = MAX_WAIT_S) -> None:
        if limit < 1:
            raise ValueError(f"the read credit must be >= 1 chunk, got {limit}")
        self.limit = limit
        self.max_wait_s = max_wait_s
        self._lock = threading.Lock()
        self._owed: dict[str, int] = {}
        self._waiting: dict[str, asyncio.Future[None]] = {}

    def restart(self, session_id: str) -> None:
        """A new attempt reads: whatever the last one left owed is forgiven."""
        with self._lock:
            self._owed.pop(session_id, None)

    def take(self, session_id: str, chunks: int = 1) -> bool:
        """``chunks`` were read; True if the session is past its limit (``room`` waits)."""
        with self._lock:
            owed = self._owed.get(session_id, 0) + chunks
            self._owed[session_id] = owed
            return owed > self.limit

    def give_back(self, session_id: str, chunks: int) -> None:
        """``chunks`` of the session were written (or dropped): a waiting read goes on once
        at most half the limit is owed."""
        with self._lock:
            owed = max(0, self._owed.get(session_id, 0) - chunks)
            if owed:
                self._owed[session_id] = owed
            else:
                self._owed.pop(session_id, None)
            waiting = self._waiting.get(session_id) if owed <= self.limit // 2 else None
            if waiting is not None:
                del self._waiting[session_id]
        if waiting is not None:
            waiting.get_loop().call_soon_threadsafe(_release, waiting)

    async def room(self, session_id: str) -> None:
        """Wait (on the stream loop) until the session may read again, at most ``max_wait_s``."""
        waiting: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:
            if self._owed.get(session_id, 0) <= self.limit // 2:
                return
            self._waiting[session_id] = waiting
        try:
            await asyncio.wait_for(asyncio.shield(waiting), self.max_wait_s)
        except TimeoutError:
            pass
        finally:
            with self._lock:
                if self._waiting.get(session_id) is waiting:
                    del self._waiting[session_id]

    def owed(self, session_id: str) -> int:
        with self._lock:
            return self._owed.get(session_id, 0)


def _release(waiting: asyncio.Future[None]) -> None:
    if not waiting.done():
        waiting.set_result(None)
