"""What a written tool-call frame says about its card, read as a client reads it.

The observer learns a card's life from the frames the emitter wrote (``frames_written``)
rather than from hooks in every role: the frames are the card's life as the user saw it.
Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["CardStep", "card_step"]

CardStepKind = Literal["preparing", "arguments", "running", "completed", "failed", "discarded"]
"""``preparing``: the early card (name only); ``arguments``: the complete call, still
waiting (for permission); ``running``: ``in_progress``; then one terminal step."""


@dataclass(frozen=True, slots=True)
class CardStep:
    call_id: str
    tool_name: str
    kind: CardStepKind
    discard_reason: str = ""


def card_step(update: dict[str, Any]) -> CardStep | None:
    """The card step ``update`` is, or None for a frame that is not a tool call's."""
    what = update.get("sessionUpdate")
    if what != "tool_call" and what != "tool_call_update":
        return None
    meta = update.get("_meta")
    if not isinstance(meta, dict):
        meta = {}
    call_id = str(update.get("toolCallId", ""))
    tool_name = meta.get("toolName")
    name = tool_name if isinstance(tool_name, str) else ""
    status = update.get("status")
    if meta.get("preparationDiscarded"):
        return CardStep(call_id, name, "discarded", str(meta.get("discardReason", "")))
    match status:
        case "completed":
            return CardStep(call_id, name, "completed")
        case "failed":
            return CardStep(call_id, name, "failed")
        case "in_progress":
            return CardStep(call_id, name, "running")
        case "pending" if meta.get("phase") == "preparing":
            return CardStep(call_id, name, "preparing")
        case "pending" if "rawInput" in update:
            return CardStep(call_id, name, "arguments")
        case _:
            return None
