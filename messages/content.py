"""Gemini-compatible response chunks produced by the provider adapters.

Adapters for every provider speak this one shape, so the actors downstream
never branch on which wire format a chunk came from. All types are frozen and
use tuples so a chunk can be shared between threads without copying.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

Role: TypeAlias = Literal["user", "model"]


class FinishReason(str, enum.Enum):  # noqa: UP042 - str() and format() keep the member name
    """Why the model stopped, normalised across providers."""

    STOP = "STOP"
    MAX_TOKENS = "MAX_TOKENS"
    REFUSAL = "REFUSAL"
    OTHER = "OTHER"


@dataclass(frozen=True, slots=True)
class TextPart:
    """Plain text: what the user typed, or what the model answered."""

    text: str


@dataclass(frozen=True, slots=True)
class ThoughtPart:
    """Model reasoning; ``signature`` must be echoed back verbatim in history."""

    text: str = ""
    signature: str | None = None


@dataclass(frozen=True, slots=True)
class FunctionCall:
    """A complete, parsed tool call: only ever built once all arguments arrived."""

    id: str
    name: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FunctionCallPart:
    """A tool call the model made, as it stands in the history."""

    function_call: FunctionCall


@dataclass(frozen=True, slots=True)
class FunctionResponse:
    """A tool's result, fed back to the model on the next request."""

    id: str
    name: str
    response: dict[str, Any]
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class FunctionResponsePart:
    """A tool's result, as it stands in the history."""

    function_response: FunctionResponse


Part: TypeAlias = TextPart | ThoughtPart | FunctionCallPart | FunctionResponsePart
"""Any piece of a message's content: what a turn's history is made of."""


@dataclass(frozen=True, slots=True, weakref_slot=True)
class Content:
    """One message of a conversation. Weakly referable: a provider's cache of an encoded
    history lives no longer than the history's first message."""

    role: Role
    parts: tuple[Part, ...] = ()


@dataclass(frozen=True, slots=True)
class Candidate:
    content: Content = Content(role="model")
    finish_reason: FinishReason | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True, weakref_slot=True)
class GenerateContentResponse:
    """One chunk of a streamed model response.

    ``weakref_slot`` lets the preparation side channel key on this object's
    identity without becoming a field of it (see ``messages.preparation``).
    """

    candidates: tuple[Candidate, ...] = ()
    usage: Usage | None = None
    response_id: str | None = None
    model: str | None = None

    @property
    def parts(self) -> tuple[Part, ...]:
        if not self.candidates:
            return ()
        return self.candidates[0].content.parts

    @property
    def function_calls(self) -> tuple[FunctionCall, ...]:
        return tuple(p.function_call for p in self.parts if isinstance(p, FunctionCallPart))

    @property
    def finish_reason(self) -> FinishReason | None:
        if not self.candidates:
            return None
        return self.candidates[0].finish_reason


def model_chunk(
    parts: tuple[Part, ...] = (),
    *,
    finish_reason: FinishReason | None = None,
    usage: Usage | None = None,
    response_id: str | None = None,
    model: str | None = None,
) -> GenerateContentResponse:
    """Build a single-candidate model chunk, the only shape adapters emit."""
    return GenerateContentResponse(
        candidates=(Candidate(Content("model", parts), finish_reason),),
        usage=usage,
        response_id=response_id,
        model=model,
    )


def part_to_dict(part: Part) -> dict[str, Any]:
    """Gemini-style JSON for one part (used for history and debugging)."""
    if isinstance(part, TextPart):
        return {"text": part.text}
    if isinstance(part, ThoughtPart):
        out: dict[str, Any] = {"text": part.text, "thought": True}
        if part.signature is not None:
            out["thoughtSignature"] = part.signature
        return out
    if isinstance(part, FunctionCallPart):
        fc = part.function_call
        return {"functionCall": {"id": fc.id, "name": fc.name, "args": fc.args}}
    fr = part.function_response
    return {"functionResponse": {"id": fr.id, "name": fr.name, "response": fr.response}}


def response_to_dict(response: GenerateContentResponse) -> dict[str, Any]:
    """Serialise a chunk. Preparation metadata is deliberately not reachable here."""
    out: dict[str, Any] = {
        "candidates": [
            {
                "content": {
                    "role": c.content.role,
                    "parts": [part_to_dict(p) for p in c.content.parts],
                },
                **({"finishReason": c.finish_reason.value} if c.finish_reason else {}),
            }
            for c in response.candidates
        ]
    }
    if response.usage is not None:
        out["usageMetadata"] = {
            "promptTokenCount": response.usage.input_tokens,
            "candidatesTokenCount": response.usage.output_tokens,
            "totalTokenCount": response.usage.total_tokens,
        }
    if response.response_id is not None:
        out["responseId"] = response.response_id
    if response.model is not None:
        out["modelVersion"] = response.model
    return out
