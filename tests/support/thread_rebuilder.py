"""What an editor shows of a session: ``session/update`` notifications folded into turns.

It folds the way Zed's thread does: a ``user_message_chunk`` is added to the
user message shown last when nothing came after it (unless the chunk names
another ``messageId``), and opens a new turn otherwise; agent text and
thoughts grow the last item of their kind; a plan replaces the turn's plan;
a tool card is opened by ``tool_call`` and changed in place by its updates.
A client's own prompt enters with ``sent``, as an editor shows what was
typed. So an agent that echoed a prompt to its sender shows it twice here,
and one whose replay lacks the prompts shows answers without questions.
Updates that are no part of the thread (titles, usage, config) are skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Card", "Said", "ThreadRebuilder", "Turn"]


@dataclass(slots=True)
class Card:
    """A tool card as it ends: its last title and status, and whether its call was discarded."""

    call_id: str
    title: str
    status: str
    discarded: bool = False


@dataclass(frozen=True, slots=True)
class Said:
    """A run of agent text (``thought`` False) or of its thoughts."""

    text: str
    thought: bool


@dataclass(slots=True)
class Turn:
    """A user message and everything shown after it, in order; ``plan`` is the last plan."""

    user: list[dict[str, Any]]
    items: list[Said | Card] = field(default_factory=list)
    plan: list[dict[str, Any]] | None = None
    message_id: str | None = field(default=None, compare=False)


class ThreadRebuilder:
    def __init__(self) -> None:
        self.turns: list[Turn] = []
        self._cards: dict[str, Card] = {}

    def sent(self, blocks: Sequence[dict[str, Any]]) -> None:
        """The client's own prompt, shown as typed."""
        self.turns.append(Turn(user=list(blocks)))

    def apply_all(self, updates: Iterable[dict[str, Any]]) -> ThreadRebuilder:
        for update in updates:
            self.apply(update)
        return self

    def apply(self, update: dict[str, Any]) -> None:
        kind = update["sessionUpdate"]
        if kind == "user_message_chunk":
            self._user_chunk(update)
        elif kind in ("agent_message_chunk", "agent_thought_chunk"):
            self._said(update["content"]["text"], thought=kind == "agent_thought_chunk")
        elif kind == "plan":
            self._turn().plan = list(update["entries"])
        elif kind == "tool_call":
            card = Card(str(update["toolCallId"]), update["title"], update["status"])
            self._cards[card.call_id] = card
            self._turn().items.append(card)
        elif kind == "tool_call_update":
            card = self._cards[str(update["toolCallId"])]
            card.title = update.get("title", card.title)
            card.status = update.get("status", card.status)
            meta = update.get("_meta") or {}
            card.discarded = card.discarded or meta.get("preparationDiscarded") is True

    def _user_chunk(self, update: dict[str, Any]) -> None:
        message_id = update.get("messageId")
        last = self.turns[-1] if self.turns else None
        if (
            last is not None
            and not last.items
            and last.plan is None
            and (last.message_id is None or last.message_id == message_id)
        ):
            last.user.append(update["content"])
            last.message_id = last.message_id or message_id
            return
        self.turns.append(Turn(user=[update["content"]], message_id=message_id))

    def _said(self, text: str, *, thought: bool) -> None:
        items = self._turn().items
        if items and isinstance(items[-1], Said) and items[-1].thought == thought:
            items[-1] = Said(items[-1].text + text, thought)
        else:
            items.append(Said(text, thought))

    def _turn(self) -> Turn:
        """The turn shown last; an answer before any question opens one with no user message."""
        if not self.turns:
            self.turns.append(Turn(user=[]))
        return self.turns[-1]
