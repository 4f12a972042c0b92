"""The emitter writes a batch's frames of every session sharing one output in one call.

Driven through a real ``RoleDirectory`` to a real ``AcpEmitter``; the sinks are
the editor's side, which records what it was handed and how.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from typing import Any

import pytest

from toolprep.actors.acp_emitter import AcpEmitter, EmitterState
from toolprep.actors.base import EMITTER
from toolprep.actors.directory import RoleDirectory
from toolprep.messages.turns import AttachSink, SessionFrames, WriteFrames

WAIT_S = 30.0


class FrameByFrame:
    """An output of its own, which records each call it is handed."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[str, dict[str, Any]]]] = []
        self.lock = threading.Lock()

    def send_update(self, session_id: str, update: dict[str, Any]) -> None:
        with self.lock:
            self.calls.append([(session_id, update)])

    def send_updates(self, frames: Sequence[tuple[str, dict[str, Any]]]) -> None:
        with self.lock:
            self.calls.append(list(frames))

    def request_permission(self, session_id: str, tool_call: Any, request: Any) -> Future[str]:
        raise AssertionError("no permission is asked here")


class Together(FrameByFrame):
    """An output that notes, for each batch, whether a write waiting to be stored had
    been told so by then."""

    def __init__(self, watched: Future[str | None]) -> None:
        super().__init__()
        self.watched = watched
        self.told_before_written: list[bool] = []

    def send_updates(self, frames: Sequence[tuple[str, dict[str, Any]]]) -> None:
        with self.lock:
            self.calls.append(list(frames))
            self.told_before_written.append(self.watched.done())


@pytest.fixture
def directory() -> Iterator[RoleDirectory]:
    roles = RoleDirectory()
    roles.register(EMITTER, lambda: AcpEmitter.start(roles, EmitterState()))
    yield roles
    roles.stop_all()


def _frame(text: str) -> dict[str, Any]:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}


def test_frames_of_sessions_on_one_output_are_written_in_one_call_in_order(
    directory: RoleDirectory,
) -> None:
    stored: Future[str | None] = Future()
    shared, alone = Together(stored), FrameByFrame()
    for session_id, sink in (("a", shared), ("b", shared), ("c", alone)):
        directory.tell(EMITTER, AttachSink(session_id, sink))
    directory.tell(
        EMITTER,
        WriteFrames(
            (
                SessionFrames("a", (_frame("a1"), _frame("a2"))),
                SessionFrames("c", (_frame("c1"),)),
                SessionFrames("b", (_frame("b1"),)),
                SessionFrames("a", (_frame("a3"),), stored),
            )
        ),
    )
    assert stored.result(WAIT_S) is None
    assert shared.calls == [
        [("a", _frame("a1")), ("a", _frame("a2")), ("b", _frame("b1")), ("a", _frame("a3"))]
    ]
    assert shared.told_before_written == [False], "a write is stored-and-sent only once sent"
    assert alone.calls == [[("c", _frame("c1"))]]


def test_a_single_write_goes_through_the_same_call(directory: RoleDirectory) -> None:
    stored: Future[str | None] = Future()
    shared = Together(stored)
    directory.tell(EMITTER, AttachSink("a", shared))
    directory.tell(EMITTER, WriteFrames.of("a", (_frame("a1"),), stored))
    assert stored.result(WAIT_S) is None
    assert shared.calls == [[("a", _frame("a1"))]]
