"""The reader's outbox: one loop iteration's chunks of every stream, in one hop, in order.

Driven on a real asyncio loop through a real ``RoleDirectory`` to a real actor
that keeps what it is told, which is what the tracker sees.
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Callable, Iterator

import pytest

from toolprep.actors.base import TRACKER, Handlers, RoleActor
from toolprep.actors.directory import RoleDirectory
from toolprep.actors.stream_reader import ChunkOutbox
from toolprep.messages.content import Candidate, Content, GenerateContentResponse, TextPart
from toolprep.messages.turns import AttemptChunks, ChunksReceived, StreamCompleted

WAIT_S = 30.0


class KeepsMessages(RoleActor):
    role = TRACKER

    def __init__(self, directory: RoleDirectory, inbox: queue.Queue[object]) -> None:
        super().__init__(directory)
        self.inbox = inbox

    def handlers(self) -> Handlers:
        return {
            ChunksReceived: self.inbox.put,
            StreamCompleted: self.inbox.put,
        }


@pytest.fixture
def told() -> Iterator[tuple[RoleDirectory, queue.Queue[object]]]:
    directory = RoleDirectory()
    inbox: queue.Queue[object] = queue.Queue()
    directory.register(TRACKER, lambda: KeepsMessages.start(directory, inbox))
    yield directory, inbox
    directory.stop_all()


def _chunk(text: str) -> GenerateContentResponse:
    return GenerateContentResponse((Candidate(Content("model", (TextPart(text),))),))


def _in_one_iteration(directory: RoleDirectory, steps: Callable[[ChunkOutbox], None]) -> None:
    """Run ``steps`` on a fresh outbox within one iteration of a real loop, then let the
    loop run what they scheduled (the outbox's flush)."""

    async def iteration() -> None:
        steps(ChunkOutbox(directory, asyncio.get_running_loop()))
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    asyncio.run(iteration())


def _texts(message: AttemptChunks) -> list[str]:
    return [
        part.text for chunk in message.chunks for part in chunk.parts if isinstance(part, TextPart)
    ]


def test_one_iteration_of_many_streams_is_one_message_in_the_order_read(
    told: tuple[RoleDirectory, queue.Queue[object]],
) -> None:
    directory, inbox = told

    def read(outbox: ChunkOutbox) -> None:
        outbox.add("s1", 1, _chunk("a"))
        outbox.add("s2", 4, _chunk("x"))
        outbox.add("s1", 1, _chunk("b"))

    _in_one_iteration(directory, read)
    message = inbox.get(timeout=WAIT_S)
    assert isinstance(message, ChunksReceived)
    assert [(b.session_id, b.attempt, _texts(b)) for b in message.batches] == [
        ("s1", 1, ["a", "b"]),
        ("s2", 4, ["x"]),
    ]
    assert inbox.empty()


def test_a_lone_stream_travels_as_a_batch_of_one(
    told: tuple[RoleDirectory, queue.Queue[object]],
) -> None:
    directory, inbox = told
    _in_one_iteration(directory, lambda outbox: outbox.add("s1", 1, _chunk("a")))
    message = inbox.get(timeout=WAIT_S)
    assert isinstance(message, ChunksReceived)
    (batch,) = message.batches
    assert _texts(batch) == ["a"]


def test_a_stream_end_comes_after_every_chunk_read_before_it(
    told: tuple[RoleDirectory, queue.Queue[object]],
) -> None:
    """The end is told straight away, so the pending chunks must go first, not a loop
    iteration later."""
    directory, inbox = told

    def read_then_end(outbox: ChunkOutbox) -> None:
        outbox.add("s1", 1, _chunk("a"))
        outbox.add("s2", 1, _chunk("x"))
        outbox.flush()
        directory.tell(TRACKER, StreamCompleted("s1", 1))

    _in_one_iteration(directory, read_then_end)
    first, second = inbox.get(timeout=WAIT_S), inbox.get(timeout=WAIT_S)
    assert isinstance(first, ChunksReceived) and len(first.batches) == 2
    assert second == StreamCompleted("s1", 1)
    assert inbox.empty()  # the flush that was still scheduled found nothing to send


def test_an_abandoned_attempt_hands_over_nothing(
    told: tuple[RoleDirectory, queue.Queue[object]],
) -> None:
    directory, inbox = told

    def read_then_cancel(outbox: ChunkOutbox) -> None:
        outbox.add("s1", 1, _chunk("a"))
        outbox.add("s2", 1, _chunk("x"))
        outbox.drop("s1", 1)

    _in_one_iteration(directory, read_then_cancel)
    message = inbox.get(timeout=WAIT_S)
    assert isinstance(message, ChunksReceived)
    (batch,) = message.batches
    assert (batch.session_id, _texts(batch)) == ("s2", ["x"])
