"""A session's stream waits for the roles once it is past its read credit, and only then."""

from __future__ import annotations

import asyncio
import threading

import pytest

from toolprep.actors.read_credit import WEIGHT_CHARACTERS, ReadCredit, chunk_weight
from toolprep.messages.content import Candidate, Content, GenerateContentResponse, TextPart


def _text_chunk(text: str) -> GenerateContentResponse:
    return GenerateContentResponse(candidates=(Candidate(Content("model", (TextPart(text),))),))


def test_a_chunk_weighs_one_and_one_more_per_block_of_text() -> None:
    assert chunk_weight(GenerateContentResponse()) == 1
    assert chunk_weight(_text_chunk("a few words")) == 1
    assert chunk_weight(_text_chunk("x" * (3 * WEIGHT_CHARACTERS))) == 4


def test_past_the_limit_a_read_waits_until_half_is_written() -> None:
    credit = ReadCredit(limit=10, max_wait_s=60)
    assert not credit.take("s1", 10)
    assert credit.take("s1", 1)  # 11 owed: past the limit
    assert not credit.take("s2", 3)  # another session has its own

    async def read_on() -> float:
        loop = asyncio.get_running_loop()
        waited = asyncio.ensure_future(credit.room("s1"))
        await asyncio.sleep(0)
        writer = threading.Thread(target=credit.give_back, args=("s1", 5))  # 6 owed: not yet
        writer.start()
        writer.join()
        await asyncio.sleep(0)
        assert not waited.done()
        start = loop.time()
        threading.Thread(target=credit.give_back, args=("s1", 1)).start()  # 5: half
        await waited
        return loop.time() - start

    assert asyncio.run(read_on()) < 30
    assert credit.owed("s1") == 5 and credit.owed("s2") == 3


def test_a_wait_gives_up_in_time_and_a_new_attempt_starts_clean() -> None:
    """Credit a crashed role never gave back must not stop the session for good."""
    credit = ReadCredit(limit=2, max_wait_s=0.01)
    credit.take("s1", 5)
    asyncio.run(credit.room("s1"))  # nobody gives anything back: it returns anyway
    credit.restart("s1")
    assert credit.owed("s1") == 0 and not credit.take("s1")
    credit.give_back("s1", 10)  # more than owed (the last attempt's): never below zero
    assert credit.owed("s1") == 0


def test_a_limit_below_one_chunk_is_refused() -> None:
    with pytest.raises(ValueError, match=">= 1 chunk"):
        ReadCredit(limit=0)
