"""Builders for the ACP ``session/update`` payloads toolprep sends.

Kept as plain dicts (serialised by orjson in the emitter) whose shapes follow
ACP protocol version 1 exactly. Status values are the four v1 allows; a
discarded preparation is ``failed`` plus ``_meta.preparationDiscarded`` so an
older client still sees a terminal card.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal


def provenance_meta(tool_name: str) -> dict[str, Any]:
    """``mcp__<server>__<tool>`` names come from an MCP server; the rest are built in."""
    if tool_name.startswith("mcp__"):
        server, sep, tool = tool_name[5:].partition("__")
        if server and sep and tool:
            return {"provenance": "mcp", "serverId": server}
    return {"provenance": "builtin"}


def _meta(tool_name: str, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"toolName": tool_name}
    meta.update(extra)
    meta.update(provenance_meta(tool_name))
    return meta


def preparing(call_id: str, tool_name: str, kind: str) -> dict[str, Any]:
    """The early card: identity only, never arguments."""
    return {
        "sessionUpdate": "tool_call",
        "toolCallId": call_id,
        "title": tool_name,
        "kind": kind,
        "status": "pending",
        "rawInput": {},
        "content": [],
        "locations": [],
        "_meta": _meta(tool_name, phase="preparing"),
    }


def discarded(call_id: str, tool_name: str) -> dict[str, Any]:
    """Terminal update for a preparation whose attempt was abandoned."""
    return {
        "sessionUpdate": "tool_call_update",
        "toolCallId": call_id,
        "status": "failed",
        "content": [],
        "_meta": _meta(tool_name, phase="preparing", preparationDiscarded=True),
    }


def execution_started(
    call_id: str,
    tool_name: str,
    *,
    title: str,
    kind: str,
    locations: Sequence[dict[str, Any]],
    raw_input: dict[str, Any],
    prepared: bool,
    status: Literal["in_progress", "pending"] = "in_progress",
) -> dict[str, Any]:
    """Execution begins with complete arguments; a never-prepared call opens its card here.

    ``pending``: the call is complete but waits for the user's permission
    (ACP's ``pending`` covers "awaiting approval"); ``in_progress`` follows
    only once it is allowed.
    """
    return {
        "sessionUpdate": "tool_call_update" if prepared else "tool_call",
        "toolCallId": call_id,
        "title": title,
        "kind": kind,
        "status": status,
        "rawInput": raw_input,
        "locations": list(locations),
        **({} if prepared else {"content": []}),
        "_meta": _meta(tool_name),
    }


def tool_result(
    call_id: str,
    tool_name: str,
    *,
    ok: bool,
    content: Sequence[dict[str, Any]],
    raw_output: Any,
) -> dict[str, Any]:
    return {
        "sessionUpdate": "tool_call_update",
        "toolCallId": call_id,
        "status": "completed" if ok else "failed",
        "content": list(content),
        "rawOutput": raw_output,
        "_meta": _meta(tool_name),
    }


def text_content(text: str) -> dict[str, Any]:
    return {"type": "content", "content": {"type": "text", "text": text}}


def agent_message_chunk(text: str) -> dict[str, Any]:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}


def agent_thought_chunk(text: str) -> dict[str, Any]:
    return {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": text}}


def plan(entries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {"sessionUpdate": "plan", "entries": list(entries)}


TERMINAL_STATUSES = frozenset({"completed", "failed"})


def card_change(update: dict[str, Any]) -> tuple[str, str, bool] | None:
    """``(call id, tool name, terminal?)`` for a tool-call frame, else None.

    Whoever relays or stores frames keeps these to know which cards are still
    open, so that cards left open by a process that died can still get their
    terminal update.
    """
    kind = update.get("sessionUpdate")
    if kind != "tool_call" and kind != "tool_call_update":
        return None
    meta = update.get("_meta")
    tool_name = meta.get("toolName", "") if isinstance(meta, dict) else ""
    terminal = update.get("status") in TERMINAL_STATUSES
    return str(update.get("toolCallId")), str(tool_name), terminal
