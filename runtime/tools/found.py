"""The one shape of a glob's or a search's result: found lines, capped, maybe partial.

Both tools list what they found one per line, stop at a cap with a note
asking the model to narrow down, and say when a spent work budget left the
result partial; keeping that wording in one place keeps the two alike.
"""

from __future__ import annotations

from typing import Any

from toolprep.runtime.tools.acp_shapes import code_block, text_content
from toolprep.runtime.tools.base import ToolOutput

__all__ = ["found_output"]


def found_output(
    lines: list[str],
    raw: dict[str, Any],
    *,
    nothing: str,
    capped: str | None,
    stopped: str | None,
) -> ToolOutput:
    """``lines`` as a tool result.

    ``nothing`` says that nothing was found (no final full stop); ``capped``,
    when the cap cut the result, is the note that says so; ``stopped`` is the
    budget's note when it ran out. ``raw`` gains ``stopped`` and ``truncated``.
    """
    if stopped is not None:
        raw["stopped"] = stopped
    if not lines:
        text = f"{nothing}." if stopped is None else f"{nothing} in the part searched: {stopped}."
        return ToolOutput(llm_output=text, content=(text_content(text),), raw_output=raw)
    body = "\n".join(lines)
    if capped is not None:
        body += f"\n... {capped}"
    elif stopped is not None:
        body += f"\n... {stopped}"
    raw["truncated"] = capped is not None or stopped is not None
    return ToolOutput(llm_output=body, content=(text_content(code_block(body)),), raw_output=raw)
