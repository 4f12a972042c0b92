"""The frames a live daemon session keeps for late clients: all of them, in order, and
finished turns in a fraction of their size."""

from __future__ import annotations

import orjson
import pytest

from toolprep.messages import frames
from toolprep.runtime.daemon.frame_history import FrameHistory


def _turn(number: int) -> list[bytes]:
    """What a turn with a text answer and one read sends, encoded as the emitter does."""
    call_id = f"toolu_{number:06d}"
    updates = [
        frames.session_info_update(f"turn {number}", 1_800_000_000.0 + number),
        *(frames.agent_message_chunk(f"Reading part {i} of the file. ") for i in range(20)),
        frames.preparing(call_id, "read_file", "read"),
        frames.execution_started(
            call_id,
            "read_file",
            title=f"Read src/module_{number}.py",
            kind="read",
            locations=[{"path": f"/project/src/module_{number}.py"}],
            raw_input={"path": f"src/module_{number}.py"},
            prepared=True,
        ),
        frames.usage_update(1000 + number, 200_000),
    ]
    return [orjson.dumps(update) for update in updates]


def test_every_frame_comes_back_in_order_sealed_or_not() -> None:
    history = FrameHistory()
    sent: list[bytes] = []
    for number in range(5):
        for frame in _turn(number):
            history.append(frame)
            sent.append(frame)
        if number < 4:  # the last turn is still running
            history.seal()
    assert list(history) == sent
    history.seal()
    history.seal()  # nothing open: nothing changes
    assert list(history) == sent


def test_finished_turns_take_a_fraction_of_their_size() -> None:
    history = FrameHistory()
    raw = 0
    for number in range(50):
        for frame in _turn(number):
            history.append(frame)
            raw += len(frame)
        history.seal()
    assert history.stored_bytes * 4 < raw


def test_a_frame_with_a_raw_newline_is_refused() -> None:
    history = FrameHistory()
    with pytest.raises(ValueError, match="raw newlines"):
        history.append(b'{"a":\n1}')
    assert list(history) == []
