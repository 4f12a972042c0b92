"""list_directory and glob: finding files by name.

Both report paths relative to the session cwd, so the model can pass them
straight back to read_file, and both stop at a configurable count with a note
asking the model to narrow down rather than flooding its context. A glob also
runs within a work budget (entries visited, wall time), so a glob over a
huge or deep tree returns what it found so far rather than running on.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path
from typing import Any, ClassVar

from toolprep.runtime.tools.acp_shapes import code_block, location, text_content
from toolprep.runtime.tools.base import ToolContext, ToolError, ToolKind, ToolOutput
from toolprep.runtime.tools.budget import WorkBudget
from toolprep.runtime.tools.builtin import BuiltinTool, shorten, str_arg
from toolprep.runtime.tools.confined_fs import LinkLeadsOutside, stat_inside
from toolprep.runtime.tools.found import found_output
from toolprep.runtime.tools.globs import glob_regex, split_glob
from toolprep.runtime.tools.paths import display_path, resolve_path, title_path
from toolprep.runtime.tools.walk import Base, open_base, open_dir_below, walk

__all__ = ["GlobTool", "ListDirectoryTool", "base_location"]


def base_location(args: Mapping[str, Any], cwd: Path, key: str = "path") -> list[dict[str, Any]]:
    """The directory a listing or search runs in, as an ACP location (cwd by default)."""
    raw = str_arg(args, key, ".")
    try:
        return [location(resolve_path(raw, cwd))]
    except ToolError:
        return []


def _describe(base: Base, name: str, cwd: Path) -> tuple[bool, str]:
    """(is_dir, display line) for entry ``name`` of the listed directory.

    One ``lstat`` through the directory's descriptor says what the entry is
    at one instant; a symlink is shown with its target, and ends in ``/``
    when the confined walk finds it leads to a directory inside cwd. A
    symlink leading outside is named as such and never followed, not even
    to ask what is there.
    """
    try:
        info = os.stat(name, dir_fd=base.fd, follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode):
            return True, f"{name}/"
        if not stat.S_ISLNK(info.st_mode):
            return False, f"{name} ({info.st_size} bytes)"
        target = os.readlink(name, dir_fd=base.fd)
    except OSError:
        return False, name
    try:
        leads = stat_inside(base.below(name), cwd)
    except LinkLeadsOutside:
        return False, f"{name} -> {target} (outside the working directory)"
    except (ToolError, OSError):
        return False, f"{name} -> {target}"
    if stat.S_ISDIR(leads.st_mode):
        return True, f"{name}/ -> {target}"
    return False, f"{name} -> {target}"


class ListDirectoryTool(BuiltinTool):
    """List one directory's entries (not recursive)."""

    name = "list_directory"
    description = (
        "List the entries of a directory in the working directory (default: the working "
        "directory itself). Directories end with '/', files show their size in bytes, "
        "symlinks their target."
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
        path = resolve_path(raw, ctx.cwd)
        with open_base(raw, ctx.cwd, self.name) as base:
            try:
                with os.scandir(base.fd) as scan:
                    names = [entry.name for entry in scan]
            except OSError as exc:
                raise ToolError(f"{self.name}: cannot list {raw!r}: {exc.strerror}") from None
            described = [_describe(base, name, ctx.cwd) for name in names]
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
        where = resolve_path(base_raw, ctx.cwd)
        with open_base(base_raw, ctx.cwd, self.name) as base:
            if not prefix:
                return self._matching(base, where, pattern, rest, depth, ctx)
        where = resolve_path(os.path.join(where, prefix), ctx.cwd)
        with open_dir_below(str(where), ctx.cwd) as inner:
            if inner is None:
                return self._result(pattern, [], False, None)
            return self._matching(inner, where, pattern, rest, depth, ctx)

    def _matching(
        self,
        base: Base,
        where: Path,
        pattern: str,
        rest: str,
        depth: int | None,
        ctx: ToolContext,
    ) -> ToolOutput:
        """What below ``base`` (the open directory ``where``) matches the glob ``rest``."""
        if not rest:
            return self._result(pattern, [display_path(where, ctx.cwd)], False, None)
        glob = glob_regex(rest)
        budget = WorkBudget.for_call(self.config, ctx)
        cap = self.config.max_glob_results
        found: list[str] = []
        truncated = False
        entries = walk(
            base,
            ctx.cwd,
            max_depth=depth,
            cancelled=ctx.cancelled,
            budget=budget,
            hidden=self.config.hidden_paths,
        )
        with closing(entries):
            for entry in entries:
                if not glob.match(entry.rel):
                    continue
                if len(found) == cap:
                    truncated = True
                    break
                rel = base.below(entry.rel)
                found.append(rel + "/" if entry.kind == "dir" else rel)
        return self._result(pattern, found, truncated, budget.note())

    def _result(
        self, pattern: str, found: list[str], truncated: bool, stopped: str | None
    ) -> ToolOutput:
        capped = (
            f"more than {len(found)} matches; narrow the pattern or path" if truncated else None
        )
        return found_output(
            found,
            {"count": len(found)},
            nothing=f"No paths match {pattern!r}",
            capped=capped,
            stopped=stopped,
        )
