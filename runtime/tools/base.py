"""The contract between the ToolExecutor and a tool.

Tools are plain blocking callables run on the executor's worker pool. They
describe themselves to the editor (ACP kind, title, locations) from their
arguments, and report results both for the editor (ACP content) and for the
model (``llm_output``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from toolprep.messages.permissions import PermissionOutcome, PermissionRequest, ToolKind
from toolprep.runtime.tools.cancellation import CancelEvent

__all__ = [
    "ClientFilesystem",
    "PermissionOutcome",
    "PermissionRequest",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolKind",
    "ToolOutput",
]


class ToolError(Exception):
    """A tool failed in an expected way; the message is shown to user and model.

    ``card_title``, if given, retitles the call's card: a call that never ran says so
    in its title, where an editor shows it first.
    """

    def __init__(self, message: str, *, card_title: str | None = None) -> None:
        super().__init__(message)
        self.card_title = card_title


class ClientFilesystem(Protocol):
    """The editor's file access (ACP ``fs/*``), offered when the client supports it.

    Going through the editor means reads see unsaved buffers and writes land
    in its undo history. Both calls block the calling worker until the client
    answers, and raise ``ToolError`` if it fails.
    """

    can_read: bool
    can_write: bool

    def read_text_file(
        self, path: str, line: int | None = None, limit: int | None = None
    ) -> str: ...

    def write_text_file(self, path: str, content: str) -> None: ...


@dataclass(slots=True)
class ToolContext:
    """Per-call environment. ``request_permission`` blocks until the client answers."""

    session_id: str
    cwd: Path
    tool_call_id: str
    cancelled: CancelEvent = field(default_factory=CancelEvent)
    request_permission: Callable[[PermissionRequest], PermissionOutcome] | None = None
    timeout: float | None = None
    client_fs: ClientFilesystem | None = None


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a finished tool returns.

    ``content`` is ACP ToolCallContent (``{"type": "content", ...}`` or
    ``{"type": "diff", ...}``); ``llm_output`` is what the model sees;
    ``plan`` (todo_write only) becomes an ACP ``plan`` update instead of a card.
    """

    llm_output: str
    content: tuple[dict[str, Any], ...] = ()
    raw_output: Any = None
    plan: tuple[dict[str, Any], ...] | None = None


class Tool(Protocol):
    name: str
    description: str
    parameters: dict[str, Any]
    kind: ToolKind

    def title(self, args: Mapping[str, Any]) -> str: ...

    def locations(self, args: Mapping[str, Any], cwd: Path) -> list[dict[str, Any]]: ...

    def needs_permission(self, args: Mapping[str, Any]) -> bool: ...

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput: ...
