"""Asking the client before a tool does something the user has not pre-approved.

The request blocks the worker thread until the client answers, which is what
``ToolContext.request_permission`` promises. Anything other than an explicit
allow stops the tool: no channel to ask on, a rejection, a cancelled prompt,
or an outcome this version does not know.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Literal, assert_never

from toolprep.messages.modes import SessionMode
from toolprep.runtime.tools.base import (
    PermissionRequest,
    Tool,
    ToolContext,
    ToolError,
    ToolKind,
)

ALLOWED_OUTCOMES = frozenset({"allow_once", "allow_always"})

READ_ONLY_KINDS: frozenset[str] = frozenset({"read", "search", "think"})
"""Kinds of tool that change nothing; a tool may say otherwise with a ``read_only`` attribute."""

EDIT_KINDS: frozenset[str] = frozenset({"edit", "delete", "move"})
"""Kinds of tool that change files, which ``accept_edits`` lets run without asking."""

ModeRule = Literal["tool_decides", "allowed", "refused"]
"""What a session's mode makes of one call: ``tool_decides`` asks when the tool says it
needs permission; ``allowed`` runs it and grants any permission it asks for; ``refused``
does not run it."""

CANCELLED_WHILE_WAITING = "Cancelled while waiting for permission; nothing was run"
"""What a call's card says when its permission request ends in a cancel. The client's
"cancelled" answer (raised here) and the turn's cancel (written by the executor) race, so
both say exactly this, whichever reaches the call first."""


def permission_scope(tool: Tool, args: Mapping[str, Any]) -> str:
    """What an "Always allow" answer for this call covers from then on.

    A tool may say (``permission_scope(args)``, as the shell tool does for one
    program); otherwise it is every call of the tool.
    """
    scope = getattr(tool, "permission_scope", None)
    if callable(scope):
        return str(scope(args))
    return tool.name


def is_read_only(tool: Tool) -> bool:
    """Whether the tool changes nothing: its ``read_only`` attribute if it has one (an MCP
    tool has the server's ``readOnlyHint``, if the user trusts that server), else its kind."""
    declared = getattr(tool, "read_only", None)
    if isinstance(declared, bool):
        return declared
    return tool.kind in READ_ONLY_KINDS


def mode_rule(mode: SessionMode, tool: Tool) -> ModeRule:
    """What ``mode`` makes of a call of ``tool``."""
    match mode:
        case "ask":
            return "tool_decides"
        case "accept_edits":
            return "allowed" if tool.kind in EDIT_KINDS else "tool_decides"
        case "plan":
            return "tool_decides" if is_read_only(tool) else "refused"
        case "auto":
            return "allowed"
        case _:
            assert_never(mode)


def refused_in_plan_mode(tool: Tool) -> tuple[str, str]:
    """The card title and the text (for card and model) of a call plan mode does not run.

    A tool whose claim to be read-only was not believed says why in a
    ``read_only_unverified`` attribute (an MCP tool of an untrusted server);
    the text adds it, so the user learns what would let such a tool run.
    """
    title = f"{tool.name}: not run, plan mode allows read-only tools"
    text = (
        f"{tool.name} was not run: this session is in plan mode, which allows read-only "
        "tools only (reading, listing and searching files, the todo list). Describe the "
        "change or command you would make instead; the user can switch modes to let it run."
    )
    unverified = getattr(tool, "read_only_unverified", None)
    if isinstance(unverified, str):
        text = f"{text} {unverified}"
    return title, text


REFUSED_TITLE_CHARS = 60
"""How much of the call's own title a refused card's title keeps: enough to tell the call
apart, short enough for one line; the card's content and ``rawInput`` keep all of it."""


def refused_title(tool_name: str, why: str, title: str) -> str:
    """The title of a card whose call a permission answer stopped: what was refused and why,
    in the style of a discarded card's (``<tool>: not run, <why>``)."""
    shown = " ".join(title.split())
    if len(shown) > REFUSED_TITLE_CHARS:
        shown = shown[: REFUSED_TITLE_CHARS - 1].rstrip() + "\u2026"
    return (
        f"{tool_name}: not run, {why} \u2014 {shown}" if shown else f"{tool_name}: not run, {why}"
    )


class AlwaysAllowed:
    """The scopes each session's user answered "Always allow" to, until the session closes.

    Asked and told from tool worker threads, so it locks.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scopes: dict[str, set[str]] = {}

    def remember(self, session_id: str, scope: str) -> None:
        with self._lock:
            self._scopes.setdefault(session_id, set()).add(scope)

    def covers(self, session_id: str, scope: str) -> bool:
        with self._lock:
            return scope in self._scopes.get(session_id, ())

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._scopes.pop(session_id, None)


def ensure_permission(
    ctx: ToolContext,
    *,
    tool_name: str,
    title: str,
    kind: ToolKind,
    args: Mapping[str, Any],
) -> None:
    """Return if the client allows this call; raise ToolError otherwise.

    The whole ``title`` goes to the client; error messages name the call by
    the title's first line, since a multi-line title repeats a whole script.
    """
    label = title.partition("\n")[0].rstrip(":")
    if ctx.cancelled.is_set():
        raise ToolError(f"{label}: cancelled before it started")
    if ctx.request_permission is None:
        raise ToolError(
            f"{label} was not allowed: no client is available to grant permission",
            card_title=refused_title(tool_name, "no editor to ask for permission", title),
        )
    request = PermissionRequest(
        tool_call_id=ctx.tool_call_id,
        tool_name=tool_name,
        title=title,
        kind=kind,
        raw_input=dict(args),
    )
    outcome = ctx.request_permission(request)
    if outcome in ALLOWED_OUTCOMES:
        return
    if outcome == "cancelled":
        raise ToolError(CANCELLED_WHILE_WAITING)
    raise ToolError(
        f"{label} was not allowed by the user",
        card_title=refused_title(tool_name, "permission rejected", title),
    )
