"""A session's title: its first user text, on one line, short enough for a list.

One rule, used where the title is shown (``session_info_update``) and where it
is kept (the store), so the editor's list and ``session/list`` agree.
"""

from __future__ import annotations

from collections.abc import Iterable

from toolprep.messages.content import Content, TextPart

__all__ = ["TITLE_CHARS", "title_of"]

TITLE_CHARS = 80


def title_of(history: Iterable[Content]) -> str | None:
    """The title the history gives its session, or None while it holds no user text."""
    for content in history:
        if content.role != "user":
            continue
        for part in content.parts:
            if isinstance(part, TextPart) and part.text.strip():
                line = " ".join(part.text.split())
                return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1] + "…"
    return None
