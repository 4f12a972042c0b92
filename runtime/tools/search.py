"""search: grep-like regex search over the session tree.

Output is ``path:line:text`` with paths relative to cwd, the format models
already know from grep and ripgrep. Binary files, files above
``max_search_file_bytes`` and VCS internals are skipped, long lines are cut,
and the match count is capped, because a search result the model cannot read
in full is worse than a note asking it to narrow the search. Patterns are
RE2, matched in linear time, and the whole call runs within a work budget
(files visited, bytes read, wall time): a search that spends it returns
what it found so far with a note saying so. The tree is walked, and each
file opened, by descriptor (see ``walk``), so a directory swapped for a
symlink mid-search cannot lead it outside the session directory.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Generator, Mapping
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, ClassVar, assert_never

from toolprep.runtime.tools.base import ToolContext, ToolError, ToolKind, ToolOutput
from toolprep.runtime.tools.budget import WorkBudget
from toolprep.runtime.tools.builtin import BuiltinTool, shorten, str_arg
from toolprep.runtime.tools.found import found_output
from toolprep.runtime.tools.globs import glob_regex
from toolprep.runtime.tools.grep import LinePattern, matching_lines
from toolprep.runtime.tools.listing import base_location
from toolprep.runtime.tools.paths import title_path
from toolprep.runtime.tools.patterns import RE2_SYNTAX_URL, RegexSyntaxError
from toolprep.runtime.tools.walk import Base, open_base, open_entry, walk

__all__ = ["SearchTool"]

_SNIFF_BYTES = 8192


class SearchTool(BuiltinTool):
    """Search file contents for a regular expression."""

    name = "search"
    description = (
        "Search file contents, line by line, for a regular expression in RE2 syntax "
        f"({RE2_SYNTAX_URL}): like Python or PCRE but without backreferences, "
        "lookahead/lookbehind, atomic groups or possessive quantifiers; \\d and \\w are "
        "ASCII-only; prefix with (?i) to ignore case. Searches under path (a directory or a "
        "single file; default: the working directory). Optional glob filters files: without "
        "'/' it matches the file name (e.g. '*.py'), with '/' the path relative to path. "
        "Prints path:line:text; binary files and .git are skipped; results are capped, and a "
        "search over a very large tree stops early with a note."
    )
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "pattern": {
                "type": "string",
                "minLength": 1,
                "description": "Regular expression, RE2 syntax (no backreferences or lookaround).",
            },
            "path": {"type": "string", "description": "Directory or file to search."},
            "glob": {"type": "string", "description": "Only search files matching this glob."},
        },
        "required": ["pattern"],
    }
    kind: ToolKind = "search"

    def title(self, args: Mapping[str, Any]) -> str:
        pattern = str_arg(args, "pattern")
        if pattern is None:
            return "Search files"
        title = f"Search {shorten(pattern, 40)!r}"
        where = str_arg(args, "path")
        if where:
            title += f" in {title_path(where)}"
        file_glob = str_arg(args, "glob")
        if file_glob:
            title += f" ({shorten(file_glob, 30)})"
        return title

    def locations(self, args: Mapping[str, Any], cwd: Path) -> list[dict[str, Any]]:
        return base_location(args, cwd)

    def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        pattern: str = args["pattern"]
        raw_path: str = args.get("path") or "."
        file_glob: str | None = args.get("glob") or None
        try:
            line_pattern = LinePattern(pattern)
        except RegexSyntaxError as exc:
            raise ToolError(f"{self.name}: {exc}") from None
        budget = WorkBudget.for_call(self.config, ctx)
        found = _Found(cap=self.config.max_search_results)
        with open_base(raw_path, ctx.cwd, self.name, files_too=True) as base:
            match base.kind:
                case "dir":
                    self._search_tree(base, file_glob, line_pattern, ctx, budget, found)
                case "file":
                    if budget.visit():
                        self._search_file(os.dup(base.fd), base.rel, line_pattern, budget, found)
                case "other":
                    pass  # a FIFO or device: nothing to search
                case _:
                    assert_never(base.kind)
        capped = None
        if found.truncated:
            capped = f"stopped after {len(found.lines)} matches; narrow the pattern, path or glob"
        return found_output(
            found.lines,
            {"matches": len(found.lines), "files": found.files},
            nothing=f"No matches for {pattern!r}",
            capped=capped,
            stopped=budget.note(),
        )

    def _search_tree(
        self,
        base: Base,
        file_glob: str | None,
        pattern: LinePattern,
        ctx: ToolContext,
        budget: WorkBudget,
        found: _Found,
    ) -> None:
        matcher = glob_regex(file_glob) if file_glob else None
        by_name = file_glob is not None and "/" not in file_glob
        entries = walk(
            base, ctx.cwd, cancelled=ctx.cancelled, budget=budget, hidden=self.config.hidden_paths
        )
        with closing(entries):
            for entry in entries:
                if entry.kind != "file":
                    continue
                if matcher is not None and not matcher.match(entry.name if by_name else entry.rel):
                    continue
                try:
                    fd = open_entry(base, entry, ctx.cwd)
                except (OSError, ToolError):
                    continue  # gone, unreadable, or swapped for something else since listed
                self._search_file(fd, base.below(entry.rel), pattern, budget, found)
                if found.truncated or budget.stopped is not None:
                    return

    def _search_file(
        self, fd: int, rel: str, pattern: LinePattern, budget: WorkBudget, found: _Found
    ) -> None:
        """Add the matching lines of the file open as ``fd`` (closed here) to ``found``."""
        hit = False
        with os.fdopen(fd, "rb") as handle, closing(self._matches(handle, pattern, budget)) as hits:
            for number, text in hits:
                if len(found.lines) == found.cap:
                    found.truncated = True
                    break
                found.lines.append(f"{rel}:{number}:{text}")
                hit = True
        found.files += hit

    def _matches(
        self, handle: BinaryIO, pattern: LinePattern, budget: WorkBudget
    ) -> Generator[tuple[int, str], None, None]:
        """Matching lines of one text file; nothing for binary, huge, irregular or unreadable files.

        The type and size are checked on the descriptor, so they are those of
        the file that is read.
        """
        limit = self.config.max_search_line_chars
        max_bytes = self.config.max_search_file_bytes
        try:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
                return
            if b"\0" in handle.read(_SNIFF_BYTES):
                return
            handle.seek(0)
            for number, raw in matching_lines(handle, pattern, budget, max_line_bytes=max_bytes):
                # Decoding only what can be shown keeps one huge line cheap.
                text = raw[: 4 * limit].decode("utf-8", errors="replace")
                yield number, text if len(text) <= limit else text[: limit - 1] + "…"
        except OSError:
            return


@dataclass(slots=True)
class _Found:
    """The matching lines gathered so far, and whether the cap cut them off."""

    cap: int
    lines: list[str] = field(default_factory=list)
    files: int = 0
    truncated: bool = False
