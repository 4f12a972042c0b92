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
    assert history.kept_bytes * 4 < raw


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


def _numbered_turns(count: int) -> list[list[bytes]]:
    """``count`` turns numbered one after the other from frame 1."""
    turns, first = [], 1
    for number in range(count):
        turn = _numbered(_turn(number), first)
        turns.append(turn)
        first += len(turn)
    return turns


def test_past_its_budget_the_oldest_stored_turns_are_forgotten_and_the_rest_kept() -> None:
    history = FrameHistory()
    turns = _numbered_turns(40)
    for turn in turns:
        for frame in turn:
            history.append(frame)
        history.seal()
    one_turn = history.sealed_bytes // 40
    last = history.last_seq
    history.forget_stored(budget_bytes=10 * one_turn, stored_seq=last)
    assert history.sealed_bytes <= 10 * one_turn
    through = history.forgotten_through
    ends = [frames.seq_of_encoded(turn[-1]) for turn in turns]
    assert 0 < through < last and through in ends  # whole turns are forgotten
    kept = [frame for turn in turns[ends.index(through) + 1 :] for frame in turn]
    assert list(history.after(0)) == kept  # the rest is the store's to replay
    assert list(history.after(last - 3)) == kept[-3:]


def test_a_turn_the_store_does_not_hold_yet_is_kept_whatever_the_budget() -> None:
    history = FrameHistory()
    turns = _numbered_turns(3)
    for turn in turns:
        for frame in turn:
            history.append(frame)
        history.seal()
    stored_through = frames.seq_of_encoded(turns[0][-1])
    assert stored_through is not None
    history.forget_stored(budget_bytes=0, stored_seq=stored_through)
    assert history.forgotten_through == stored_through
    assert list(history) == [*turns[1], *turns[2]]
    history.forget_stored(budget_bytes=0, stored_seq=stored_through + 3)  # part of turn 2 only
    assert list(history) == [*turns[1], *turns[2]]


def test_frames_without_numbers_are_never_forgotten() -> None:
    history = FrameHistory()
    sent = _turn(0)
    for frame in sent:
        history.append(frame)
    history.seal()
    history.forget_stored(budget_bytes=0, stored_seq=10**6)
    assert list(history) == sent and history.forgotten_through == 0
