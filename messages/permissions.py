"""Asking the user before a tool runs: what is asked, and the answers ACP allows.

Shared by the tools that ask, the executor that relays and the emitter that writes the
request to the editor, so it lives with the messages rather than with any one of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

ToolKind = Literal[
    "read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"
]

PermissionOutcome = Literal[
    "allow_once", "allow_always", "reject_once", "reject_always", "cancelled"
]

PERMISSION_OUTCOMES: frozenset[str] = frozenset(get_args(PermissionOutcome))
SELECTABLE_OUTCOMES: frozenset[str] = PERMISSION_OUTCOMES - {"cancelled"}
"""The outcomes a user can choose; ``cancelled`` is what a request ends with unanswered."""


def check_outcome(outcome: str) -> PermissionOutcome:
    """``outcome`` if it is a permission outcome, else a ``ValueError`` naming the valid ones."""
    if outcome not in PERMISSION_OUTCOMES:
        raise ValueError(
            f"unknown permission outcome {outcome!r}; expected one of "
            f"{', '.join(sorted(PERMISSION_OUTCOMES))}"
        )
    return cast(PermissionOutcome, outcome)


@dataclass(frozen=True, slots=True)
class PermissionRequest:
    tool_call_id: str
    tool_name: str
    title: str
    kind: ToolKind
    raw_input: Mapping[str, Any]
