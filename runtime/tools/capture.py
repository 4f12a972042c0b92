"""Bounded capture of a command's output: the first and last bytes, and a count.

A build log's start says what ran and its end says what failed, so keeping
head and tail is more useful than keeping either alone, and memory stays
bounded by the cap however much the command prints.
"""

from __future__ import annotations


class HeadTailBuffer:
    """Keeps the first ``cap // 2`` and the last ``cap - cap // 2`` bytes written."""

    __slots__ = ("_head", "_head_cap", "_tail", "_tail_cap", "total")

    def __init__(self, cap: int) -> None:
        if cap <= 0:
            raise ValueError("cap must be positive")
        self._head_cap = cap // 2
        self._tail_cap = cap - self._head_cap
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def write(self, data: bytes) -> None:
        self.total += len(data)
        room = self._head_cap - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data:
            return
        self._tail += data[-self._tail_cap :]
        # Trim lazily (at twice the cap) so small writes don't shift the buffer each time.
        if len(self._tail) > 2 * self._tail_cap:
            del self._tail[: len(self._tail) - self._tail_cap]

    @property
    def truncated(self) -> bool:
        return self.total > self._head_cap + self._tail_cap

    def text(self) -> str:
        """The kept output as text, with a marker where bytes were dropped."""
        tail = bytes(self._tail[-self._tail_cap :]) if self._tail else b""
        head = bytes(self._head)
        if not self.truncated:
            return (head + tail).decode("utf-8", errors="replace")
        omitted = self.total - len(head) - len(tail)
        return (
            head.decode("utf-8", errors="replace")
            + f"\n\n[... {omitted} bytes of output omitted ...]\n\n"
            + tail.decode("utf-8", errors="replace")
        )
