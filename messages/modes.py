"""Session modes: how much a session's tools may do without asking the user.

A mode belongs to a session (kept in the store with it, changed by
``session/set_mode`` or the ``mode`` config option) and is read by the
executor each time a call starts. It lives with the messages because the
ACP front, the host, worker processes and the executor all speak of it.
"""

from __future__ import annotations

from typing import Any, Final, Literal, assert_never, get_args

__all__ = [
    "DEFAULT_MODE",
    "MODES",
    "MODE_OPTION",
    "SessionMode",
    "UnknownMode",
    "check_mode",
    "current_mode_update",
    "mode_description",
    "mode_name",
    "mode_option",
    "mode_state",
]

SessionMode = Literal["ask", "accept_edits", "plan", "auto"]

MODES: Final[tuple[SessionMode, ...]] = get_args(SessionMode)
DEFAULT_MODE: Final[SessionMode] = "ask"

MODE_OPTION: Final = "mode"
"""The id of the session config option that picks the mode (ACP category ``mode``)."""


class UnknownMode(ValueError):
    """A mode id this agent does not offer; the message names the ones it does."""

    def __init__(self, mode: str) -> None:
        super().__init__(f"Unknown mode {mode!r}: choose one of {', '.join(MODES)}")
        self.mode = mode


def check_mode(mode: str) -> SessionMode:
    """``mode`` as a ``SessionMode``; ``UnknownMode`` if it is none of ``MODES``."""
    if mode not in MODES:
        raise UnknownMode(mode)
    return mode


def mode_name(mode: SessionMode) -> str:
    match mode:
        case "ask":
            return "Ask"
        case "accept_edits":
            return "Accept edits"
        case "plan":
            return "Plan"
        case "auto":
            return "Auto"
        case _:
            assert_never(mode)


def mode_description(mode: SessionMode) -> str:
    match mode:
        case "ask":
            return "Shell commands and MCP tools that change things ask first"
        case "accept_edits":
            return "File edits run without asking; shell commands and MCP tools still ask"
        case "plan":
            return (
                "Read-only tools only: edits, shell commands and MCP tools are refused, "
                "but for read-only tools of servers marked trusted"
            )
        case "auto":
            return "Every tool runs without asking"
        case _:
            assert_never(mode)


def mode_state(current: SessionMode) -> dict[str, Any]:
    """The ACP ``SessionModeState`` that session/new, load and resume answer with."""
    return {
        "currentModeId": current,
        "availableModes": [
            {"id": mode, "name": mode_name(mode), "description": mode_description(mode)}
            for mode in MODES
        ],
    }


def mode_option(current: SessionMode) -> dict[str, Any]:
    """The same choice as a ``select`` config option (ACP category ``mode``)."""
    return {
        "id": MODE_OPTION,
        "name": "Mode",
        "description": "What the session's tools may do without asking",
        "category": "mode",
        "type": "select",
        "currentValue": current,
        "options": [
            {"value": mode, "name": mode_name(mode), "description": mode_description(mode)}
            for mode in MODES
        ],
    }


def current_mode_update(mode: SessionMode) -> dict[str, Any]:
    return {"sessionUpdate": "current_mode_update", "currentModeId": mode}
