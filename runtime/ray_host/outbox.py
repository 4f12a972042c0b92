"""A shard's outgoing frames, queued until the stream to the front takes them.

The worker loop and the runtime's threads write frames here; the shard's
streaming method drains them in order, a batch at a time, so one Ray stream
item carries every frame that was ready (one object per batch, not per
frame, which is what keeps the per-frame cost low under load).
"""

from __future__ import annotations

import queue
from collections.abc import Iterator, Sequence

from toolprep.runtime.workers.protocol import Event, encode_event
from toolprep.runtime.workers.wire import encode_frame, encode_frames

__all__ = ["MAX_BATCH_BYTES", "Outbox"]

MAX_BATCH_BYTES = 1024 * 1024
"""A batch closes once it holds this much (a larger single frame still goes alone)."""


class Outbox:
    """A ``FrameOutput`` whose frames come out of ``batches`` in the order written."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()

    def write(self, event: Event) -> None:
        self._queue.put(encode_frame(*encode_event(event)))

    def write_many(self, events: Sequence[Event]) -> None:
        """The frames as one queued item: a batch keeps them together, in order."""
        self._queue.put(encode_frames(map(encode_event, events)))

    def close(self) -> None:
        """No frame follows: ``batches`` ends once it has handed out what came before."""
        self._queue.put(None)

    def batches(self, max_bytes: int = MAX_BATCH_BYTES) -> Iterator[bytes]:
        """Concatenated encoded frames, blocking for the first of each batch."""
        take = self._queue.get_nowait
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch, size = [first], len(first)
            while size < max_bytes:
                try:
                    frame = take()
                except queue.Empty:
                    break
                if frame is None:
                    yield b"".join(batch)
                    return
                batch.append(frame)
                size += len(frame)
            yield b"".join(batch)
