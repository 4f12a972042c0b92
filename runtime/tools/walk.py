"""Walking the session tree and matching glob patterns, shared by glob and search.

The walk never follows symlinked directories (no loops, no escape), skips
version-control internals, drops symlinks whose target lies outside cwd, and
checks its work budget (and so cancellation) before each entry, so a walk
over a huge tree stops early with partial results instead of running on.
Order is deterministic (sorted by name, depth first) so results are stable
from one call to the next.

Globs compile to RE2, not to Python regexes: a glob like ``*a*a*a*a*b`` or
``**/**/**/x`` translates to a regex that backtracks exponentially in
Python's engine, and RE2 matches it in time linear in the path.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from toolprep.runtime.tools.base import ToolError
from toolprep.runtime.tools.budget import WorkBudget
from toolprep.runtime.tools.paths import is_within, session_root
from toolprep.runtime.tools.patterns import (
    MAX_PATTERN_CHARS,
    Regex,
    RegexSyntaxError,
    compile_regex,
    escape,
    quoted,
)

SKIP_DIRS = frozenset({".git", ".hg", ".svn"})
_MAGIC = frozenset("*?[{")
# A glob character becomes at most this many regex characters (``*`` -> ``[^/]*``).
_EXPANSION = 6


@dataclass(frozen=True, slots=True)
class Entry:
    """One walked entry; ``rel`` is relative to the walk's base, with ``/`` separators."""

    path: Path
    rel: str
    is_dir: bool
    is_symlink: bool


def _sorted_entries(directory: Path, limit: int | None) -> list[os.DirEntry[str]]:
    """The first ``limit`` entries scandir returns, sorted by name.

    The limit keeps one enormous directory from being read and sorted in full
    (sorting holds the interpreter lock) when the budget could never reach
    most of it anyway. A directory with more entries than a whole budget is
    therefore seen only in part, and which part is up to the file system.
    """
    try:
        with os.scandir(directory) as scan:
            return sorted(islice(scan, limit), key=lambda entry: entry.name)
    except OSError:
        return []


def walk(
    base: Path,
    cwd: Path,
    *,
    max_depth: int | None = None,
    cancelled: threading.Event | None = None,
    budget: WorkBudget | None = None,
) -> Iterator[Entry]:
    """Yield everything below ``base`` (not base itself), depth first, sorted.

    ``max_depth`` 1 means only base's direct children. Raises ToolError when
    ``cancelled`` (or the budget's cancel event) is set mid-walk; ends early,
    with ``budget.stopped`` set, when the budget runs out.
    """
    real_root = os.path.realpath(session_root(cwd))

    limit = None if budget is None else budget.max_entries + 1

    def entries_of(directory: Path) -> Iterator[os.DirEntry[str]]:
        return iter(_sorted_entries(directory, limit))

    stack: list[tuple[Iterator[os.DirEntry[str]], str, int]] = [(entries_of(base), "", 1)]
    while stack:
        entries, prefix, depth = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            continue
        if cancelled is not None and cancelled.is_set():
            raise ToolError("cancelled")
        if entry.name in SKIP_DIRS:
            continue
        if budget is not None and not budget.visit():
            return
        rel = prefix + entry.name
        try:
            is_link = entry.is_symlink()
            if is_link and not is_within(os.path.realpath(entry.path), real_root):
                continue
            is_dir = entry.is_dir()
        except OSError:
            continue
        yield Entry(Path(entry.path), rel, is_dir, is_link)
        if is_dir and not is_link and (max_depth is None or depth < max_depth):
            stack.append((entries_of(Path(entry.path)), rel + "/", depth + 1))


def _translate_segment(segment: str) -> str:
    """One path segment of a glob as RE2 syntax.

    Once a search for a closing ``]`` or ``}`` has failed, later openers are
    literal without searching again, which keeps a segment of many unclosed
    brackets linear rather than quadratic.
    """
    out: list[str] = []
    closes = {"]": True, "}": True}  # whether that closer may still appear ahead
    i = 0
    while i < len(segment):
        char = segment[i]
        if char == "*":
            while i + 1 < len(segment) and segment[i + 1] == "*":
                i += 1
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and closes["]"]:
            start = i + 1
            if segment[start : start + 1] in ("!", "^"):
                start += 1
            if segment[start : start + 1] == "]":
                start += 1
            end = segment.find("]", start)
            if end < 0:
                closes["]"] = False
                out.append(escape(char))
            else:
                body = segment[i + 1 : end]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:].replace("\\", "\\\\")
                else:
                    body = body.replace("\\", "\\\\")
                out.append(f"[{body}]")
                i = end
        elif char == "{" and closes["}"]:
            end = segment.find("}", i)
            if end < 0:
                closes["}"] = False
                out.append(escape(char))
            else:
                options = segment[i + 1 : end].split(",")
                out.append("(?:" + "|".join(_translate_segment(opt) for opt in options) + ")")
                i = end
        else:
            out.append(escape(char))
        i += 1
    return "".join(out)


class Glob:
    """A compiled glob; ``match`` tests a whole ``/``-separated relative path."""

    __slots__ = ("_regex", "pattern")

    def __init__(self, pattern: str, regex: Regex) -> None:
        self.pattern = pattern
        self._regex = regex

    def match(self, path: str) -> bool:
        return self._regex.fullmatch(_utf8(path))


def _utf8(path: str) -> bytes:
    """``path`` as UTF-8, a byte that is not UTF-8 becoming U+FFFD (one ``?`` in a glob).

    The file system hands back such bytes as lone surrogates, which neither
    encode as UTF-8 nor match in RE2's UTF-8 mode.
    """
    try:
        return path.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(path).decode("utf-8", errors="replace").encode("utf-8")


def glob_regex(pattern: str) -> Glob:
    """Compile a glob (``*``, ``?``, ``[..]``, ``{a,b}``, ``**`` for any depth) to RE2.

    Runs of ``**`` segments collapse into one: they mean the same and each
    would only add states to the program.
    """
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ToolError(
            f"pattern {quoted(pattern)} is not a valid glob: it is {len(pattern)} characters "
            f"long, over the limit of {MAX_PATTERN_CHARS}"
        )
    segments: list[str] = []
    for seg in pattern.split("/"):
        if seg in ("", ".") or (seg == "**" and segments[-1:] == ["**"]):
            continue
        segments.append(seg)
    parts: list[str] = []
    try:
        for index, segment in enumerate(segments):
            last = index == len(segments) - 1
            if segment == "**":
                parts.append(".*" if last else "(?:[^/]+/)*")
                continue
            parts.append(_translate_segment(segment) + ("" if last else "/"))
        regex = compile_regex("(?s)" + "".join(parts), max_chars=_EXPANSION * MAX_PATTERN_CHARS)
        return Glob(pattern, regex)
    except UnicodeEncodeError:
        detail = "it contains a lone surrogate, which is not valid text"
    except RegexSyntaxError as exc:
        detail = exc.detail
    raise ToolError(f"pattern {quoted(pattern)} is not a valid glob: {detail}")


def split_glob(pattern: str) -> tuple[str, str, int | None]:
    """Split a pattern into its literal leading directory, the magic rest, and a depth bound.

    ``src/**/*.py`` -> (``src``, ``**/*.py``, None); ``*.md`` -> (``""``, ``*.md``, 1).
    Walking only the literal prefix keeps ``src/*.py`` from scanning the whole
    tree, and lets the prefix go through path confinement like any other path.
    """
    if "\0" in pattern:
        raise ToolError(f"pattern {pattern!r} contains a NUL byte")
    segments = pattern.split("/")
    literal: list[str] = []
    while len(segments) > 1 and _MAGIC.isdisjoint(segments[0]):
        literal.append(segments.pop(0))
    rest = [seg for seg in segments if seg not in ("", ".")]
    if ".." in rest:
        raise ToolError(f"pattern {pattern!r} may not use '..' after a wildcard")
    prefix = "/".join(literal)
    if pattern.startswith("/") and not prefix.startswith("/"):
        prefix = "/" + prefix
    depth = None if "**" in rest else max(len(rest), 1)
    return prefix, "/".join(rest), depth
