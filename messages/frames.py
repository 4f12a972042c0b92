"""Builders for the ACP ``session/update`` payloads toolprep sends.

Kept as plain dicts (serialised by orjson in the emitter) whose shapes follow
ACP protocol version 1 exactly. Every tool-call frame carries ``name``, the
tool's name as the model called it, from the first preparing card on: ACP v1
made it the stable field editors read (``title`` is for people and may change).
Status values are the four v1 allows; a
discarded preparation is ``failed`` plus ``_meta.preparationDiscarded`` so an
older client still sees a terminal card.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any, Literal, assert_never

from toolprep.messages.modes import SessionMode, mode_option


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
        "name": tool_name,
        "title": tool_name,
        "kind": kind,
        "status": "pending",
        "rawInput": {},
        "content": [],
        "locations": [],
        "_meta": _meta(tool_name, phase="preparing"),
    }


DiscardReason = Literal[
    "retry",
    "model_fallback",
    "cancel",
    "stream_error",
    "crash",
    "max_tokens",
    "refusal",
    "interrupted",
    "no_tool_name",
]
"""Why a card's call never ran, or (``interrupted``) why it never ended: ``_meta.discardReason``
of its terminal frame. ``crash`` is a card whose call had not started when its process died;
``interrupted`` one whose start was written (the tool may have run, or half run);
``no_tool_name`` a call the model sent without naming a tool."""


def discard_title(tool_name: str, reason: DiscardReason, next_model: str | None = None) -> str:
    """What a client that knows nothing of discards shows on the card: not a bare failure."""
    match reason:
        case "retry":
            why = "the model retried"
        case "model_fallback":
            why = f"fell back to {next_model}" if next_model else "fell back to another model"
        case "cancel":
            why = "cancelled"
        case "stream_error":
            why = "stream failed"
        case "crash":
            why = "the agent stopped unexpectedly"
        case "max_tokens":
            why = "the reply hit the token limit"
        case "refusal":
            why = "the model refused"
        case "interrupted":
            return f"{tool_name}: interrupted, it may have run (the agent stopped before it ended)"
        case "no_tool_name":
            why = "the model did not say which tool to call"
        case _:
            assert_never(reason)
    return f"{tool_name}: not run, {why}"


def discarded(
    call_id: str, tool_name: str, reason: DiscardReason, *, next_model: str | None = None
) -> dict[str, Any]:
    """Terminal update for a card whose call never ran: its attempt was abandoned.

    ``failed`` with no content, as the design prescribes, plus a ``title``
    saying what happened, since a client unaware of ``_meta`` renders any
    ``failed`` card as a broken tool. Never arguments or locations: they may
    be partial.
    """
    return {
        "sessionUpdate": "tool_call_update",
        "toolCallId": call_id,
        "name": tool_name,
        "status": "failed",
        "title": discard_title(tool_name, reason, next_model),
        "content": [],
        "_meta": _meta(
            tool_name, phase="preparing", preparationDiscarded=True, discardReason=reason
        ),
    }


UNNAMED_CALL = "tool call without a name"
"""What a nameless call's card is called, in place of a tool name it never had."""


def unnamed_call_discarded(call_id: str) -> dict[str, Any]:
    """The one frame for a call the model sent without a tool name: opened already failed.

    Such a call never had a card (a card needs a name) and is never run: there
    is no tool to run, and sending it back to the model would put a call with
    an empty name into its history. ``name`` is left out, which ACP reads as
    "no tool name is available"; no arguments are shown.
    """
    return {
        "sessionUpdate": "tool_call",
        "toolCallId": call_id,
        "title": discard_title(UNNAMED_CALL, "no_tool_name"),
        "kind": "other",
        "status": "failed",
        "content": [],
        "_meta": {
            "toolName": None,
            "phase": "preparing",
            "preparationDiscarded": True,
            "discardReason": "no_tool_name",
        },
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
        "name": tool_name,
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
        "name": tool_name,
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


def user_message_chunk(message_id: str, block: dict[str, Any]) -> dict[str, Any]:
    """One content block of a prompt the user sent, as the session's record of it.

    ``messageId`` ties the blocks of one prompt together, so a client that
    rebuilds the thread on ``session/load`` starts a new message at each
    prompt. ``sessionUpdate`` and ``messageId`` come first: a relay that holds
    the frame already encoded tells a prompt's own frames by their opening
    bytes (``runtime.acp.own_prompts``).
    """
    return {"sessionUpdate": "user_message_chunk", "messageId": message_id, "content": block}


def plan(entries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {"sessionUpdate": "plan", "entries": list(entries)}


MODEL_OPTION = "model"
"""The id of the session config option that picks the model (ACP category ``model``)."""


def session_options(model: str, models: Sequence[str], mode: SessionMode) -> list[dict[str, Any]]:
    """A session's config options, as ``session/new`` and ``config_option_update`` carry them.

    The model comes first: a dropdown of the configured models, the session's
    choice first in line and the rest its fallbacks in their order. The mode
    follows, the same choice ``session/set_mode`` makes.
    """
    return [
        {
            "id": MODEL_OPTION,
            "name": "Model",
            "description": "The model this session's turns start with; the others are its "
            "fallbacks, in the order shown",
            "category": "model",
            "type": "select",
            "currentValue": model,
            "options": [{"value": name, "name": name} for name in models],
        },
        mode_option(mode),
    ]


def config_option_update(model: str, models: Sequence[str], mode: SessionMode) -> dict[str, Any]:
    return {
        "sessionUpdate": "config_option_update",
        "configOptions": session_options(model, models, mode),
    }


def usage_update(used: int, size: int) -> dict[str, Any]:
    """How full the model's context window is after a request (``used`` of ``size`` tokens)."""
    return {"sessionUpdate": "usage_update", "used": used, "size": size}


def iso8601(seconds: float) -> str:
    """A time in seconds since the epoch as ACP writes times: UTC, milliseconds, ``Z``."""
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def session_info_update(title: str, updated_at: float) -> dict[str, Any]:
    return {
        "sessionUpdate": "session_info_update",
        "title": title,
        "updatedAt": iso8601(updated_at),
    }


TERMINAL_STATUSES = frozenset({"completed", "failed"})

META_KEY = "toolprep"
"""The key of toolprep's own fields in a frame's ``_meta``: ``{"seq": n}`` numbers the frame in
its session's log, ``{"gap": {...}}`` marks frames the log lacks."""

_SEQ_TAIL = b'"' + META_KEY.encode() + b'":{"seq":'
_GAP_HEAD = b'"' + META_KEY.encode() + b'":{"gap":{'
_GAP_SEQ_TAIL = b'},"seq":'


def numbered(update: dict[str, Any], seq: int) -> dict[str, Any]:
    """``update`` as its session's frame number ``seq``: ``_meta.toolprep.seq``.

    ``_meta`` goes last and the number last in it, so the encoded frame ends with
    ``"toolprep":{"seq":N}}}`` (``"toolprep":{"gap":{...},"seq":N}}}`` for a gap mark) and
    ``seq_of_encoded`` reads it back without parsing.
    """
    if "_meta" not in update:  # most frames (message text): a copy and one key added
        framed = dict(update)
        framed["_meta"] = {META_KEY: {"seq": seq}}
        return framed
    meta = dict(update["_meta"] or {})
    ours = meta.pop(META_KEY, None)
    gap = ours.get("gap") if isinstance(ours, dict) else None
    # A gap mark stored in the log keeps what it marks; the number still goes last.
    meta[META_KEY] = {"seq": seq} if gap is None else {"gap": gap, "seq": seq}
    framed = {key: value for key, value in update.items() if key != "_meta"}
    framed["_meta"] = meta
    return framed


def _ours(update: dict[str, Any], key: str) -> Any:
    """``update["_meta"]["toolprep"][key]``, None where any of them is missing or no object."""
    meta = update.get("_meta")
    ours = meta.get(META_KEY) if isinstance(meta, dict) else None
    return ours.get(key) if isinstance(ours, dict) else None


def seq_of(update: dict[str, Any]) -> int | None:
    """The frame's number in its session's log, None if it has none."""
    seq = _ours(update, "seq")
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def seq_of_encoded(frame: bytes) -> int | None:
    """``seq_of`` an encoded frame ``numbered`` wrote, read from its tail; None otherwise."""
    if not frame.endswith(b"}}}"):
        return None
    start = frame.rfind(_SEQ_TAIL)
    if start >= 0:
        digits = frame[start + len(_SEQ_TAIL) : -3]
    else:  # a numbered gap mark: its gap (a flat object) comes before its number
        start = frame.rfind(_GAP_SEQ_TAIL)
        if not 0 <= frame.rfind(_GAP_HEAD) < start:
            return None
        digits = frame[start + len(_GAP_SEQ_TAIL) : -3]
    return int(digits) if digits.isdigit() else None


GapCause = Literal["refused", "stopped", "pending"]
"""Why a log lacks frames: ``refused``, the store refused to write them (their count is
known); ``stopped``, the agent stopped before they were stored (the count is a bound: the
numbers were reserved, and some of them may never have been shown); ``pending``, the store
cannot be written now and the agent serving the session keeps them to write once it can
(a bound too)."""


def gap_mark(missing: int, after_seq: int, cause: GapCause = "refused") -> dict[str, Any]:
    """What a replay shows where the log lacks ``missing`` frames after ``after_seq``: they
    were sent to the clients but never stored.

    For a ``stopped`` or ``pending`` gap ``missing`` is an upper bound, and the text and
    ``_meta`` say so (``upTo``): the numbers were reserved before any was shown, not each as
    it was.
    """
    noun = "update was" if missing == 1 else "updates were"
    gap: dict[str, Any] = {"afterSeq": after_seq, "missing": missing}
    match cause:
        case "refused":
            text = f"{missing} {noun} not saved here: the session store could not write them"
        case "stopped":
            text = (
                f"up to {missing} {noun} not saved here: the agent stopped before they were stored"
            )
            gap["upTo"] = True
            gap["cause"] = "stopped"
        case "pending":
            text = (
                f"up to {missing} {noun} not saved yet: the session store cannot be written "
                "now, the agent writes them once it can"
            )
            gap["upTo"] = True
            gap["cause"] = "pending"
        case _:
            assert_never(cause)
    return {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": f"\n[{text}]\n"},
        "_meta": {META_KEY: {"gap": gap}},
    }


def gap_of(update: dict[str, Any]) -> tuple[int, int] | None:
    """``(afterSeq, missing)`` of a ``gap_mark``, None for any other frame."""
    gap = _ours(update, "gap")
    if not isinstance(gap, dict):
        return None
    after, missing = gap.get("afterSeq"), gap.get("missing")
    if isinstance(after, int) and isinstance(missing, int):
        return after, missing
    return None


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
