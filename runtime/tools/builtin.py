"""Shared behaviour of the built-in tools.

Each built-in validates its arguments against its own schema and, when
``needs_permission`` says so, asks the client before doing anything; putting
both in ``run`` here means no tool can forget either. The same goes for the
agent's secrets: a ``path`` inside a hidden path (``ToolConfig.hidden_paths``: the data
directory, credential files) is refused, and every output has the secrets the
agent holds masked (``ToolConfig.environment``), as a shell command's has.
Subclasses implement ``execute`` with arguments already known to fit their schema.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, overload

from toolprep.runtime.tools.base import ToolContext, ToolError, ToolKind, ToolOutput
from toolprep.runtime.tools.config import ToolConfig
from toolprep.runtime.tools.permissions import ensure_permission
from toolprep.runtime.tools.validation import validate_args


class BuiltinTool:
    """Base for the built-in tools; satisfies ``runtime.tools.base.Tool``."""

    name: str = ""
    description: str = ""
    kind: ToolKind = "other"
    #: The JSON schema of the arguments; each instance exposes its own copy as
    #: ``parameters`` so a caller editing one tool's schema cannot change another's.
    schema: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}

    def __init__(self, config: ToolConfig | None = None) -> None:
        self.config = config if config is not None else ToolConfig()
        self.parameters: dict[str, Any] = copy.deepcopy(self.schema)

    def title(self, args: Mapping[str, Any]) -> str:
        return self.name

    def locations(self, args: Mapping[str, Any], cwd: Path) -> list[dict[str, Any]]:
        return []

    def needs_permission(self, args: Mapping[str, Any]) -> bool:
        return False

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        validate_args(self.name, self.parameters, args)
        if self.needs_permission(args):
            ensure_permission(
                ctx, tool_name=self.name, title=self.title(args), kind=self.kind, args=args
            )
        if ctx.cancelled.is_set():
            raise ToolError(f"{self.title(args)}: cancelled")
        raw = args.get("path")
        if isinstance(raw, str):
            refused = self.config.hidden_paths.refusal(self.name, raw, ctx.cwd)
            if refused is not None:
                raise ToolError(refused)
        return mask_output(self.execute(args, ctx), self.config.environment.mask)

    def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        raise NotImplementedError


def mask_output(output: ToolOutput, mask: Callable[[str], str]) -> ToolOutput:
    """``output`` with ``mask`` applied to every string in it."""
    return ToolOutput(
        llm_output=mask(output.llm_output),
        content=tuple(_masked(item, mask) for item in output.content),
        raw_output=_masked(output.raw_output, mask),
        plan=None if output.plan is None else tuple(_masked(p, mask) for p in output.plan),
    )


def _masked(value: Any, mask: Callable[[str], str]) -> Any:
    match value:
        case str():
            return mask(value)
        case dict():
            return {key: _masked(item, mask) for key, item in value.items()}
        case list() | tuple():
            return type(value)(_masked(item, mask) for item in value)
        case _:
            return value


@overload
def str_arg(args: Mapping[str, Any], key: str) -> str | None: ...


@overload
def str_arg(args: Mapping[str, Any], key: str, default: str) -> str: ...


def str_arg(args: Mapping[str, Any], key: str, default: str | None = None) -> str | None:
    """A string argument for titles/locations, tolerant of incomplete or wrong args.

    Titles and locations are computed for cards whose arguments may be partial,
    so they read arguments through this instead of trusting the schema.
    """
    value = args.get(key) if isinstance(args, Mapping) else None
    return value if isinstance(value, str) and value else default


def int_arg(args: Mapping[str, Any], key: str) -> int | None:
    """An integer argument for titles/locations, or None if absent or not an int."""
    value = args.get(key) if isinstance(args, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def shorten(text: str, limit: int = 60) -> str:
    """The first line of ``text``, cut to ``limit`` characters, for a card title."""
    first, _, rest = text.strip().partition("\n")
    if len(first) > limit:
        return first[: limit - 1] + "…"
    return first + ("…" if rest else "")
