"""search: grep-like regex search over the session tree.

Output is ``path:line:text`` with paths relative to cwd, the format models
already know from grep and ripgrep. Binary files, files above
``max_search_file_bytes`` and VCS internals are skipped, long lines are cut,
and the match count is capped, because a search result the model cannot read
in full is worse than a note asking it to narrow the search.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

from toolprep.runtime.tools.acp_shapes import code_block, text_content
from toolprep.runtime.tools.base import ToolContext, ToolError, ToolKind, ToolOutput
from toolprep.runtime.tools.builtin import BuiltinTool, shorten, str_arg
from toolprep.runtime.tools.listing import base_location
from toolprep.runtime.tools.paths import resolve_path, session_root, title_path
from toolprep.runtime.tools.walk import glob_regex, walk

_SNIFF_BYTES = 8192


class SearchTool(BuiltinTool):
    """Search file contents for a regular expression."""

    name = "search"
    description = (
        "Search file contents for a regular expression (Python syntax; prefix with (?i) to "
        "ignore case) under path (a directory or a single file; default: the working "
        "directory). Optional glob filters files: without '/' it matches the file name "
        "(e.g. '*.py'), with '/' the path relative to path. Prints path:line:text; binary "
        "files and .git are skipped; results are capped."
    )
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "description": "Regular expression."},
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
            regex = re.compile(pattern)
        except re.error as exc:
            raise ToolError(
                f"{self.name}: pattern {pattern!r} is not a valid regex: {exc}"
            ) from None
        base = resolve_path(raw_path, ctx.cwd)
        if not os.path.exists(base):
            raise ToolError(f"{self.name}: {raw_path!r} does not exist")
        root = session_root(ctx.cwd)
        cap = self.config.max_search_results
        lines: list[str] = []
        files_matched = 0
        truncated = False
        for file_path in self._files(base, ctx, file_glob):
            rel = os.path.relpath(file_path, root)
            hit = False
            for number, text in self._matches(file_path, regex):
                if len(lines) == cap:
                    truncated = True
                    break
                lines.append(f"{rel}:{number}:{text}")
                hit = True
            files_matched += hit
            if truncated:
                break
        return self._result(pattern, lines, files_matched, truncated)

    def _files(self, base: Path, ctx: ToolContext, file_glob: str | None) -> Iterator[Path]:
        if not os.path.isdir(base):
            yield base
            return
        matcher = glob_regex(file_glob) if file_glob else None
        by_name = file_glob is not None and "/" not in file_glob
        for entry in walk(base, ctx.cwd, cancelled=ctx.cancelled):
            if entry.is_dir:
                continue
            if matcher is not None:
                subject = entry.path.name if by_name else entry.rel
                if not matcher.match(subject):
                    continue
            yield entry.path

    def _matches(self, path: Path, regex: re.Pattern[str]) -> Iterator[tuple[int, str]]:
        """Matching lines of one text file; nothing for binary, huge or unreadable files."""
        limit = self.config.max_search_line_chars
        try:
            if (
                not os.path.isfile(path)
                or os.path.getsize(path) > self.config.max_search_file_bytes
            ):
                return
            with open(path, "rb") as handle:
                if b"\0" in handle.read(_SNIFF_BYTES):
                    return
                handle.seek(0)
                for number, raw in enumerate(handle, 1):
                    text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                    if regex.search(text):
                        yield number, text if len(text) <= limit else text[: limit - 1] + "…"
        except OSError:
            return

    def _result(self, pattern: str, lines: list[str], files: int, truncated: bool) -> ToolOutput:
        if not lines:
            text = f"No matches for {pattern!r}."
            return ToolOutput(
                llm_output=text,
                content=(text_content(text),),
                raw_output={"matches": 0, "files": 0},
            )
        body = "\n".join(lines)
        if truncated:
            body += f"\n... stopped after {len(lines)} matches; narrow the pattern, path or glob"
        return ToolOutput(
            llm_output=body,
            content=(text_content(code_block(body)),),
            raw_output={"matches": len(lines), "files": files, "truncated": truncated},
        )
