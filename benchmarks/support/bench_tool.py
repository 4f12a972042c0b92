"""``bench_tool``: a tool that does nothing and returns at once, so only the runtime is measured."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolprep.runtime.tools.base import ToolContext, ToolKind, ToolOutput
from toolprep.runtime.tools.registry import ToolRegistry

__all__ = ["BenchTool", "bench_registry"]


class BenchTool:
    """Named in every tool call of the load generator (``load_server --tool bench_tool``)."""

    name = "bench_tool"
    description = "Writes nothing; returns at once"
    parameters: dict[str, Any] = {"type": "object", "properties": {"path": {"type": "string"}}}  # noqa: RUF012
    kind: ToolKind = "edit"

    def title(self, args: Mapping[str, Any]) -> str:
        return f"Edit {args.get('path')}"

    def locations(self, args: Mapping[str, Any], cwd: Path) -> list[dict[str, Any]]:
        return []

    def needs_permission(self, args: Mapping[str, Any]) -> bool:
        return False

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        return ToolOutput(llm_output="ok")


def bench_registry() -> ToolRegistry:
    """A registry holding only ``bench_tool``."""
    registry = ToolRegistry()
    registry.register(BenchTool())
    return registry
