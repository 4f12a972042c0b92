"""list_directory and glob: finding files by name.

Both report paths relative to the session cwd, so the model can pass them
straight back to read_file, and both stop at a configurable count with a note
asking the model to narrow down rather than flooding its context. A glob also
runs within a work budget (entries visited, wall time), so a glob over a
huge or deep tree returns what it found so far rather than running on.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from toolprep.runtime.tools.acp_shapes import code_block, location, text_content
from toolprep.runtime.tools.base import ToolContext, ToolError, ToolKind, ToolOutput
from toolprep.runtime.tools.budget import WorkBudget
from toolprep.runtime.tools.builtin import BuiltinTool, shorten, str_arg
from toolprep.runtime.tools.paths import display_path, resolve_path, session_root, title_path
from toolprep.runtime.tools.walk import glob_regex, split_glob, walk


def base_location(args: Mapping[str, Any], cwd: Path, key: str = "path") -> list[dict[str, Any]]:
    """The directory a listing or search runs in, as an ACP location (cwd by default)."""
    raw = str_arg(args, key, ".")
    try:
        return [location(resolve_path(raw, cwd))]
    except ToolError:
        return []


def resolve_dir(raw: str, cwd: Path, tool: str) -> Path:
    """Confine ``raw`` and require it to be an existing directory."""
    path = resolve_path(raw, cwd)
    if not os.path.exists(path):
        raise ToolError(f"{tool}: {raw!r} does not exist")
    if not os.path.isdir(path):
        raise ToolError(f"{tool}: {raw!r} is not a directory")
    return path


def _describe(entry: os.DirEntry[str]) -> tuple[bool, str]:
    """(is_dir, display line) for one directory entry."""
    try:
        if entry.is_symlink():
            target = os.readlink(entry.path)
            suffix = "/" if entry.is_dir() else ""
            return entry.is_dir(), f"{entry.name}{suffix} -> {target}"
        if entry.is_dir():
            return True, f"{entry.name}/"
        return False, f"{entry.name} ({entry.stat().st_size} bytes)"
    except OSError:
        return False, entry.name


class ListDirectoryTool(BuiltinTool):
    """List one directory's entries (not recursive)."""

    name = "list_directory"
    description = (
        "List the entries of a directory in the working directory (default: the working "
        "directory itself). Directories end with '/', files show their size in bytes."
    )
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "Directory to list, relative to the working directory.",
            },
        },
    }
    kind: ToolKind = "read"

    def title(self, args: Mapping[str, Any]) -> str:
        raw = str_arg(args, "path", ".")
        return f"List {title_path(raw)}"

    def locations(self, args: Mapping[str, Any], cwd: Path) -> list[dict[str, Any]]:
        return base_location(args, cwd)

    def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        raw: str = args.get("path") or "."
        path = resolve_dir(raw, ctx.cwd, self.name)
        try:
            with os.scandir(path) as scan:
                described = [_describe(entry) for entry in scan]
        except OSError as exc:
            raise ToolError(f"{self.name}: cannot list {raw!r}: {exc.strerror}") from None
        described.sort(key=lambda item: (not item[0], item[1]))
        cap = self.config.max_list_entries
        lines = [line for _, line in described[:cap]]
        shown = display_path(path, ctx.cwd)
        if not described:
            body = "(empty directory)"
        else:
            body = "\n".join(lines)
            if len(described) > cap:
                body += f"\n... and {len(described) - cap} more entries (listing capped at {cap})"
        return ToolOutput(
            llm_output=f"Directory {shown} ({len(described)} entries):\n{body}",
            content=(text_content(code_block(body)),),
            raw_output={
                "path": str(path),
                "entries": len(described),
                "truncated": len(described) > cap,
            },
        )


class GlobTool(BuiltinTool):
    """Find files and directories whose path matches a glob pattern."""

    name = "glob"
    description = (
        "Find paths matching a glob pattern such as '**/*.py' or 'src/*.{ts,tsx}', relative to "
        "path (default: the working directory). '*' does not cross '/', '**' matches any depth. "
        "Results are relative to the working directory; directories end with '/'. A glob over "
        "a very large tree stops early with a note."
    )
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "description": "Glob pattern."},
            "path": {"type": "string", "description": "Directory to search in."},
        },
        "required": ["pattern"],
    }
    kind: ToolKind = "search"

    def title(self, args: Mapping[str, Any]) -> str:
        pattern = str_arg(args, "pattern")
        if pattern is None:
            return "Find files"
        where = str_arg(args, "path")
        return f"Find {shorten(pattern)}" + (f" in {title_path(where)}" if where else "")

    def locations(self, args: Mapping[str, Any], cwd: Path) -> list[dict[str, Any]]:
        return base_location(args, cwd)

    def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        pattern: str = args["pattern"]
        base_raw: str = args.get("path") or "."
        prefix, rest, depth = split_glob(pattern)
        base = resolve_dir(base_raw, ctx.cwd, self.name)
        if prefix:
            base = resolve_path(os.path.join(base, prefix), ctx.cwd)
            if not os.path.isdir(base):
                return self._result(pattern, [], False, None)
        if not rest:
            return self._result(pattern, [display_path(base, ctx.cwd)], False, None)
        glob = glob_regex(rest)
        root = session_root(ctx.cwd)
        budget = WorkBudget.for_call(self.config, ctx)
        cap = self.config.max_glob_results
        found: list[str] = []
        truncated = False
        for entry in walk(base, ctx.cwd, max_depth=depth, cancelled=ctx.cancelled, budget=budget):
            if not glob.match(entry.rel):
                continue
            if len(found) == cap:
                truncated = True
                break
            rel = os.path.relpath(entry.path, root)
            found.append(rel + "/" if entry.is_dir else rel)
        return self._result(pattern, found, truncated, budget.note())

    def _result(
        self, pattern: str, found: list[str], truncated: bool, stopped: str | None
    ) -> ToolOutput:
        raw: dict[str, Any] = {"count": len(found)}
        if stopped is not None:
            raw["stopped"] = stopped
        if not found:
            text = f"No paths match {pattern!r}."
            if stopped is not None:
                text = f"No paths match {pattern!r} in the part searched: {stopped}."
            return ToolOutput(llm_output=text, content=(text_content(text),), raw_output=raw)
        body = "\n".join(found)
        if truncated:
            body += f"\n... more than {len(found)} matches; narrow the pattern or path"
        elif stopped is not None:
            body += f"\n... {stopped}"
        raw["truncated"] = truncated or stopped is not None
        return ToolOutput(
            llm_output=body,
            content=(text_content(code_block(body)),),
            raw_output=raw,
        )
