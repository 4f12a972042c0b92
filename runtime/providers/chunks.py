"""Fast constructors for the chunk shapes the adapters emit on every delta.

A streamed text delta becomes four frozen dataclass instances (part,
content, candidate, response). Their generated ``__init__`` sets each field
through ``object.__setattr__``; with slotted classes the member descriptors
can be called directly for the same result at roughly half the cost, which
matters because this runs once per text or thinking delta of every stream.

The descriptors are reached through ``dataclass_compat``, resolved once here at
import. The objects built here are ordinary instances of the ``messages.content``
classes, equal to ones built the normal way. The field lists are checked
against the dataclasses at import, so a change to those classes fails loudly
here instead of leaving a field unset.
"""

from __future__ import annotations

from toolprep.messages.content import (
    Candidate,
    Content,
    FinishReason,
    GenerateContentResponse,
    Part,
    TextPart,
    ThoughtPart,
    Usage,
)
from toolprep.runtime.providers.dataclass_compat import SlotSetter, allocate, slot_setters

__all__ = ["chunk", "text_chunk", "thought_chunk"]

_new = allocate


def _setters(cls: type, names: tuple[str, ...]) -> tuple[SlotSetter, ...]:
    try:
        return slot_setters(cls, names)
    except TypeError as exc:
        raise TypeError(f"{exc}: update {__name__}") from None


(_text,) = _setters(TextPart, ("text",))
_thought_text, _thought_signature = _setters(ThoughtPart, ("text", "signature"))
_role, _parts = _setters(Content, ("role", "parts"))
_content, _finish = _setters(Candidate, ("content", "finish_reason"))
_candidates, _usage, _response_id, _model = _setters(
    GenerateContentResponse, ("candidates", "usage", "response_id", "model")
)


def chunk(
    parts: tuple[Part, ...],
    finish_reason: FinishReason | None,
    usage: Usage | None,
    response_id: str | None,
    model: str | None,
) -> GenerateContentResponse:
    """Same as ``messages.content.model_chunk`` (a single model candidate), only faster."""
    content = _new(Content)
    _role(content, "model")
    _parts(content, parts)
    candidate = _new(Candidate)
    _content(candidate, content)
    _finish(candidate, finish_reason)
    response: GenerateContentResponse = _new(GenerateContentResponse)
    _candidates(response, (candidate,))
    _usage(response, usage)
    _response_id(response, response_id)
    _model(response, model)
    return response


def text_chunk(text: str, response_id: str | None, model: str | None) -> GenerateContentResponse:
    """A chunk holding one ``TextPart`` (``chunk`` inlined: this is the most frequent shape)."""
    part = _new(TextPart)
    _text(part, text)
    content = _new(Content)
    _role(content, "model")
    _parts(content, (part,))
    candidate = _new(Candidate)
    _content(candidate, content)
    _finish(candidate, None)
    response: GenerateContentResponse = _new(GenerateContentResponse)
    _candidates(response, (candidate,))
    _usage(response, None)
    _response_id(response, response_id)
    _model(response, model)
    return response


def thought_chunk(
    text: str, signature: str | None, response_id: str | None, model: str | None
) -> GenerateContentResponse:
    part = _new(ThoughtPart)
    _thought_text(part, text)
    _thought_signature(part, signature)
    return chunk((part,), None, None, response_id, model)
