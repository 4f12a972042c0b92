"""A worker's batch of frames reaches the front whole and in order, on either way out.

``PipeSink.send_updates`` is what the emitter calls with a batch of frames of the
worker's sessions; on a pipe they go out in one write, through a Ray shard's outbox
as one queued item, and the front reads them back frame by frame as before.
"""

from __future__ import annotations

import io
import os
import threading
from typing import Any

import orjson

from toolprep.messages.frames import card_change, discarded
from toolprep.runtime.ray_host.outbox import Outbox
from toolprep.runtime.workers.protocol import Event, Updated, decode_event
from toolprep.runtime.workers.wire import FrameReader, FrameWriter
from toolprep.runtime.workers.worker import EventWriter, PipeSink

FRAMES: list[tuple[str, dict[str, Any]]] = [
    ("s1", {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "a"}}),
    ("s2", discarded("call_1", "bench_tool", "cancel")),
    ("s1", {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "b"}}),
]

EXPECTED = [Updated(s, card_change(u), orjson.dumps(u)) for s, u in FRAMES]


def _events(data: bytes) -> list[Event]:
    reader = FrameReader(io.BytesIO(data))
    events = []
    while (frame := reader.read()) is not None:
        events.append(decode_event(*frame))
    return events


def test_a_batch_on_the_pipe_is_one_write_read_back_frame_by_frame() -> None:
    read_end, write_end = os.pipe()
    received = bytearray()

    def drain() -> None:
        with os.fdopen(read_end, "rb") as pipe:
            while chunk := pipe.read(65536):
                received.extend(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        PipeSink(EventWriter(FrameWriter(write_end))).send_updates(FRAMES)
    finally:
        os.close(write_end)
        reader.join(30)
    assert _events(bytes(received)) == EXPECTED


def test_a_batch_through_a_shards_outbox_keeps_its_place_among_single_frames() -> None:
    outbox = Outbox()
    sink = PipeSink(outbox)
    sink.send_update(*FRAMES[0])
    sink.send_updates(FRAMES[1:])
    outbox.close()
    assert _events(b"".join(outbox.batches())) == EXPECTED
