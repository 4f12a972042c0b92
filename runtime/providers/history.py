"""Pieces of history conversion that both wire formats share."""

from __future__ import annotations

import orjson

from toolprep.messages.content import FunctionResponse

__all__ = ["MISSING_RESULT", "tool_result_text"]

MISSING_RESULT = "The tool call was not executed (the turn ended before it ran)."
"""Sent for a call that has no result in history: both APIs reject an unanswered call."""


def tool_result_text(response: FunctionResponse) -> str:
    """The text a model sees for a tool result: the bare output, or JSON for anything richer."""
    body = response.response
    if len(body) == 1:
        (value,) = body.values()
        if isinstance(value, str):
            return value
    return orjson.dumps(body).decode()
