"""The fast chunk constructors build exactly what the normal constructors build."""

from __future__ import annotations

import dataclasses

import pytest

from toolprep.messages.content import (
    FinishReason,
    TextPart,
    ThoughtPart,
    Usage,
    model_chunk,
    response_to_dict,
)
from toolprep.messages.preparation import ToolCallPreparation, get_preparations, set_preparations
from toolprep.runtime.providers.chunks import chunk, text_chunk, thought_chunk


def test_text_chunk_equals_model_chunk() -> None:
    fast = text_chunk("hello", "msg_1", "m")
    assert fast == model_chunk((TextPart("hello"),), response_id="msg_1", model="m")
    assert response_to_dict(fast) == response_to_dict(
        model_chunk((TextPart("hello"),), response_id="msg_1", model="m")
    )


def test_thought_chunk_equals_model_chunk() -> None:
    assert thought_chunk("t", "sig", None, None) == model_chunk((ThoughtPart("t", "sig"),))


def test_general_chunk_equals_model_chunk() -> None:
    usage = Usage(3, 4)
    assert chunk((), FinishReason.MAX_TOKENS, usage, "r", None) == model_chunk(
        (), finish_reason=FinishReason.MAX_TOKENS, usage=usage, response_id="r"
    )


def test_fast_chunks_stay_frozen_and_carry_preparations_by_identity() -> None:
    first, second = text_chunk("x", None, None), text_chunk("x", None, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.model = "changed"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.parts[0].text = "changed"  # type: ignore[misc, union-attr]
    set_preparations(first, [ToolCallPreparation("c", "t")])
    assert get_preparations(first) == (ToolCallPreparation("c", "t"),)
    assert get_preparations(second) == ()
