"""The set of tools a session can call, by name.

The runtime builds one registry with the built-ins (``default_registry``); a
hosting daemon adds its own Tool objects with ``register`` (or swaps a
built-in with ``replace=True``). The registry is filled at start-up and then
only read, from many worker threads, so it keeps a plain dict and hands out
snapshots.
"""

from __future__ import annotations

import copy
import re

from toolprep.runtime.providers.base import ToolDeclaration
from toolprep.runtime.tools.base import Tool
from toolprep.runtime.tools.config import ToolConfig
from toolprep.runtime.tools.files import ReadFileTool, WriteFileTool
from toolprep.runtime.tools.listing import GlobTool, ListDirectoryTool
from toolprep.runtime.tools.search import SearchTool
from toolprep.runtime.tools.shell import RunShellCommandTool
from toolprep.runtime.tools.todo import TodoWriteTool

# What both Anthropic and OpenAI accept as a function name.
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_MCP_PREFIX = "mcp__"


def provenance(name: str) -> tuple[str, str | None]:
    """Where a tool comes from, for ACP ``_meta``: ``("mcp", server)`` or ``("builtin", None)``.

    MCP tools follow the ``mcp__<server>__<tool>`` naming convention; a name
    that only looks half like it (no server or no tool part) is not MCP.
    """
    if name.startswith(_MCP_PREFIX):
        server, sep, tool = name[len(_MCP_PREFIX) :].partition("__")
        if server and sep and tool:
            return "mcp", server
    return "builtin", None


class ToolRegistry:
    """Tools by name, in registration order (the order the model sees them)."""

    __slots__ = ("_tools",)

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    def register(self, tool: Tool, *, replace: bool = False) -> None:
        """Add ``tool``; refuse a duplicate name unless ``replace`` is set.

        Duplicates are refused by default because two tools with one name
        would make the model's calls ambiguous, and silently shadowing a
        built-in is almost always a mistake in the daemon's set-up.
        """
        if not _NAME.match(tool.name):
            raise ValueError(f"tool name {tool.name!r} must match {_NAME.pattern}")
        if tool.name in self._tools and not replace:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def unregister(self, name: str) -> Tool | None:
        """Remove and return the tool called ``name`` (None if there was none)."""
        return self._tools.pop(name, None)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def provenance(self, name: str) -> tuple[str, str | None]:
        """Same as the module-level ``provenance``; here for callers holding a registry."""
        return provenance(name)

    def declarations(self) -> tuple[ToolDeclaration, ...]:
        """What the model is told about each tool; schemas are copies, safe to mutate."""
        return tuple(
            ToolDeclaration(
                name=tool.name,
                description=tool.description,
                parameters=copy.deepcopy(tool.parameters),
            )
            for tool in self._tools.values()
        )

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)


def builtin_tools(config: ToolConfig | None = None) -> tuple[Tool, ...]:
    """Fresh instances of every built-in tool sharing one config."""
    config = config if config is not None else ToolConfig()
    return (
        ReadFileTool(config),
        WriteFileTool(config),
        ListDirectoryTool(config),
        GlobTool(config),
        SearchTool(config),
        RunShellCommandTool(config),
        TodoWriteTool(config),
    )


def default_registry(config: ToolConfig | None = None) -> ToolRegistry:
    """A registry holding all built-in tools."""
    registry = ToolRegistry()
    for tool in builtin_tools(config):
        registry.register(tool)
    return registry
