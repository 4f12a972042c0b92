"""Builders for the ACP dicts tools hand back (ToolCallContent, locations, plan entries).

Tools build these shapes in one place so they match the ACP v1 schema by
construction; the tests validate every builder against the official schema.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

PlanStatus = Literal["pending", "in_progress", "completed"]
PlanPriority = Literal["high", "medium", "low"]

_BACKTICK_RUNS = re.compile(r"`+")
"""Matched in C: the fence is chosen for every tool output, some of them megabytes long."""


def text_content(text: str) -> dict[str, Any]:
    """A ToolCallContent item holding one Markdown text block."""
    return {"type": "content", "content": {"type": "text", "text": text}}


def diff_content(path: Path | str, old_text: str | None, new_text: str) -> dict[str, Any]:
    """A ToolCallContent diff; ``old_text`` is None when the file is new."""
    return {"type": "diff", "path": str(path), "oldText": old_text, "newText": new_text}


def location(path: Path | str, line: int | None = None) -> dict[str, Any]:
    """A ToolCallLocation so the editor can follow along; ``path`` must be absolute."""
    loc: dict[str, Any] = {"path": str(path)}
    if line is not None:
        loc["line"] = max(0, line)
    return loc


def plan_entry(
    content: str, status: PlanStatus, priority: PlanPriority = "medium"
) -> dict[str, Any]:
    """An ACP PlanEntry; priority is required by the schema, so it always has one."""
    return {"content": content, "status": status, "priority": priority}


def code_block(text: str, info: str = "") -> str:
    """Fence ``text`` for Markdown with a fence longer than any backtick run inside it.

    Command output routinely contains triple backticks (think ``cat README.md``);
    a fixed fence would let it break out and render as Markdown.
    """
    longest = max(map(len, _BACKTICK_RUNS.findall(text)), default=0) if "`" in text else 0
    fence = "`" * max(3, longest + 1)
    body = text if text.endswith("\n") or not text else text + "\n"
    return f"{fence}{info}\n{body}{fence}"
