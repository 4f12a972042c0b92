"""Which tools never get a card.

One rule shared by the tracker (preparing frames) and the emitter (every
frame), so preparation can never show a card that execution suppresses.
"""

from __future__ import annotations

CARDLESS_TOOLS = frozenset({"todo_write"})


def card_suppressed(tool_name: str) -> bool:
    return tool_name in CARDLESS_TOOLS
