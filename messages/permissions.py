"""Asking the user before a tool runs: what is asked, and the answers ACP allows.

Shared by the tools that ask, the executor that relays and the emitter that writes the
request to the editor, so it lives with the messages rather than with any one of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

ToolKind = Literal[
    "read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"
]

PermissionOutcome = Literal[
    "allow_once", "allow_always", "reject_once", "reject_always", "cancelled"
]


@dataclass(frozen=True, slots=True)
class PermissionRequest:
    tool_call_id: str
    tool_name: str
    title: str
    kind: ToolKind
    raw_input: Mapping[str, Any]
