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


def _numbered(updates: list[bytes], first: int) -> list[bytes]:
    return [
        orjson.dumps(frames.numbered(orjson.loads(frame), seq))
        for seq, frame in enumerate(updates, first)
    ]


def test_a_client_resumes_after_the_last_frame_it_saw_sealed_or_not() -> None:
    """Frames carry their number in the session's log; a replay after frame n is every
    frame after it, and a frame without a number (a gap mark) goes with the one before."""
    history = FrameHistory()
    first, second = _numbered(_turn(0), 1), _numbered(_turn(1), 26)
    mark = orjson.dumps(frames.gap_mark(1, 24))  # frame 25 was not stored
    for frame in first:
        history.append(frame)
    history.seal()
    history.append(mark)
    for frame in second:
        history.append(frame)
    assert len(first) == len(second) == 24 and history.last_seq == 49
    assert list(history.after(0)) == list(history) == [*first, mark, *second]
    assert list(history.after(5)) == [*first[5:], mark, *second]
    assert list(history.after(24)) == [mark, *second]
    assert list(history.after(26)) == second[1:]
    assert list(history.after(49)) == []


def test_a_log_without_numbers_is_replayed_whole_whatever_the_client_asks_after() -> None:
    """A session kept without a store numbers no frame: a number a client sends cannot
    be from this log, and skipping frames by it would lose them."""
    history = FrameHistory()
    sent = _turn(0)
    for frame in sent:
        history.append(frame)
    assert history.last_seq == 0
    assert list(history.after(3)) == sent
