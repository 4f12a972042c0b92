"""search: grep-like regex search over the session tree.

Output is ``path:line:text`` with paths relative to cwd, the format models
already know from grep and ripgrep. Binary files, files above
``max_search_file_bytes`` and VCS internals are skipped, long lines are cut,
and the match count is capped, because a search result the model cannot read
in full is worse than a note asking it to narrow the search. Patterns are
RE2, matched in linear time, and the whole call runs within a work budget
(files visited, bytes read, wall time): a search that spends it returns
what it found so far with a note saying so.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

from toolprep.runtime.tools.acp_shapes import code_block, text_content
from toolprep.runtime.tools.base import ToolContext, ToolError, ToolKind, ToolOutput
from toolprep.runtime.tools.budget import WorkBudget
from toolprep.runtime.tools.builtin import BuiltinTool, shorten, str_arg
from toolprep.runtime.tools.grep import LinePattern, matching_lines
from toolprep.runtime.tools.listing import base_location
from toolprep.runtime.tools.paths import resolve_path, session_root, title_path
from toolprep.runtime.tools.patterns import RE2_SYNTAX_URL, RegexSyntaxError
from toolprep.runtime.tools.walk import glob_regex, walk

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
        base = resolve_path(raw_path, ctx.cwd)
        if not os.path.exists(base):
            raise ToolError(f"{self.name}: {raw_path!r} does not exist")
        root = session_root(ctx.cwd)
        budget = WorkBudget.for_call(self.config, ctx)
        cap = self.config.max_search_results
        lines: list[str] = []
        files_matched = 0
        truncated = False
        for file_path in self._files(base, ctx, file_glob, budget):
            rel = os.path.relpath(file_path, root)
            hit = False
            for number, text in self._matches(file_path, line_pattern, budget):
                if len(lines) == cap:
                    truncated = True
                    break
                lines.append(f"{rel}:{number}:{text}")
                hit = True
            files_matched += hit
            if truncated or budget.stopped is not None:
                break
        return self._result(pattern, lines, files_matched, truncated, budget.note())

    def _files(
        self, base: Path, ctx: ToolContext, file_glob: str | None, budget: WorkBudget
    ) -> Iterator[Path]:
        if not os.path.isdir(base):
            if budget.visit():
                yield base
            return
        matcher = glob_regex(file_glob) if file_glob else None
        by_name = file_glob is not None and "/" not in file_glob
        for entry in walk(base, ctx.cwd, cancelled=ctx.cancelled, budget=budget):
            if entry.is_dir:
                continue
            if matcher is not None:
                subject = entry.path.name if by_name else entry.rel
                if not matcher.match(subject):
                    continue
            yield entry.path

    def _matches(
        self, path: Path, pattern: LinePattern, budget: WorkBudget
    ) -> Iterator[tuple[int, str]]:
        """Matching lines of one text file; nothing for binary, huge or unreadable files."""
        limit = self.config.max_search_line_chars
        max_bytes = self.config.max_search_file_bytes
        try:
            if not os.path.isfile(path) or os.path.getsize(path) > max_bytes:
                return
            with open(path, "rb") as handle:
                if b"\0" in handle.read(_SNIFF_BYTES):
                    return
                handle.seek(0)
                for number, raw in matching_lines(
                    handle, pattern, budget, max_line_bytes=max_bytes
                ):
                    # Decoding only what can be shown keeps one huge line cheap.
                    text = raw[: 4 * limit].decode("utf-8", errors="replace")
                    yield number, text if len(text) <= limit else text[: limit - 1] + "…"
        except OSError:
            return

    def _result(
        self, pattern: str, lines: list[str], files: int, truncated: bool, stopped: str | None
    ) -> ToolOutput:
        raw: dict[str, Any] = {"matches": len(lines), "files": files}
        if stopped is not None:
            raw["stopped"] = stopped
        if not lines:
            text = f"No matches for {pattern!r}."
            if stopped is not None:
                text = f"No matches for {pattern!r} in the part searched: {stopped}."
            return ToolOutput(llm_output=text, content=(text_content(text),), raw_output=raw)
        body = "\n".join(lines)
        if truncated:
            body += f"\n... stopped after {len(lines)} matches; narrow the pattern, path or glob"
        elif stopped is not None:
            body += f"\n... {stopped}"
        raw["truncated"] = truncated or stopped is not None
        return ToolOutput(
            llm_output=body,
            content=(text_content(code_block(body)),),
            raw_output=raw,
        )
