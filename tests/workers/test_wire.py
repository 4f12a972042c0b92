"""Frames on the worker pipes: what a broken or hostile peer sends fails clearly."""

from __future__ import annotations

import io
import os
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolprep.runtime.workers.wire import (
    MAX_FRAME_BYTES,
    FrameReader,
    FrameWriter,
    WireError,
    encode_frame,
)

json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20)


@given(st.dictionaries(st.text(max_size=8), json_scalars, max_size=6), st.binary(max_size=200))
def test_frames_round_trip(fields: dict[str, object], payload: bytes) -> None:
    header = {**fields, "type": "kind"}
    stream = io.BytesIO(encode_frame(header, payload) + encode_frame({"type": "next"}))
    reader = FrameReader(stream)
    assert reader.read() == (header, payload)
    assert reader.read() == ({"type": "next"}, b"")
    assert reader.read() is None


def test_a_frame_cut_short_is_an_error_not_an_end() -> None:
    frame = encode_frame({"type": "updated", "session": "s1", "card": None}, b'{"a":1}')
    with pytest.raises(WireError, match="ended inside a frame"):
        FrameReader(io.BytesIO(frame[:-3])).read()
    with pytest.raises(WireError, match="ended inside a frame"):
        FrameReader(io.BytesIO(frame[:2])).read()


def test_an_absurd_length_is_refused_before_reading_it() -> None:
    stream = io.BytesIO(struct.pack(">I", MAX_FRAME_BYTES + 1) + b"x" * 10)
    with pytest.raises(WireError, match="corrupt"):
        FrameReader(stream).read()


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"no newline at all", "without a header"),
        (b"{not json\n", "not JSON"),
        (b'{"a": 1}\n', "names no frame"),
        (b"[]\n", "names no frame"),
        (b"[1, 2]\n", "names no frame"),
        (b'["ready", 4]\n', "names no frame"),  # protocol 1's positional headers
        (b'{"type": 3}\n', "names no frame"),
    ],
)
def test_headers_that_name_no_frame_are_refused(body: bytes, error: str) -> None:
    stream = io.BytesIO(struct.pack(">I", len(body)) + body)
    with pytest.raises(WireError, match=error):
        FrameReader(stream).read()


def test_the_writer_writes_whole_frames_through_a_pipe() -> None:
    read_fd, write_fd = os.pipe()
    payload = b"x" * 200_000  # more than a pipe holds: written in several pieces
    try:
        writer = FrameWriter(write_fd)
        with os.fdopen(read_fd, "rb") as reading:
            import threading

            sender = threading.Thread(target=writer.write, args=({"type": "big"}, payload))
            sender.start()
            assert FrameReader(reading).read() == ({"type": "big"}, payload)
            sender.join()
    finally:
        os.close(write_fd)
