"""Walking the session tree and matching glob patterns, shared by glob and search.

The walk never follows symlinked directories (no loops, no escape), skips
version-control internals, drops symlinks whose target lies outside cwd, and
checks for cancellation between entries so a search over a huge tree can be
stopped. Order is deterministic (sorted by name, depth first) so results are
stable from one call to the next.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from toolprep.runtime.tools.base import ToolError
from toolprep.runtime.tools.paths import is_within, session_root

SKIP_DIRS = frozenset({".git", ".hg", ".svn"})
_MAGIC = re.compile(r"[*?\[{]")


@dataclass(frozen=True, slots=True)
class Entry:
    """One walked entry; ``rel`` is relative to the walk's base, with ``/`` separators."""

    path: Path
    rel: str
    is_dir: bool
    is_symlink: bool


def _sorted_entries(directory: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as scan:
            return sorted(scan, key=lambda entry: entry.name)
    except OSError:
        return []


def walk(
    base: Path,
    cwd: Path,
    *,
    max_depth: int | None = None,
    cancelled: threading.Event | None = None,
) -> Iterator[Entry]:
    """Yield everything below ``base`` (not base itself), depth first, sorted.

    ``max_depth`` 1 means only base's direct children. Raises ToolError when
    ``cancelled`` is set mid-walk.
    """
    real_root = os.path.realpath(session_root(cwd))
    stack: list[tuple[Iterator[os.DirEntry[str]], str, int]] = [
        (iter(_sorted_entries(base)), "", 1)
    ]
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
            stack.append((iter(_sorted_entries(Path(entry.path))), rel + "/", depth + 1))


def _translate_segment(segment: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(segment):
        char = segment[i]
        if char == "*":
            while i + 1 < len(segment) and segment[i + 1] == "*":
                i += 1
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            start = i + 1
            if segment[start : start + 1] in ("!", "^"):
                start += 1
            if segment[start : start + 1] == "]":
                start += 1
            end = segment.find("]", start)
            if end < 0:
                out.append(re.escape(char))
            else:
                body = segment[i + 1 : end]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:].replace("\\", "\\\\")
                else:
                    body = body.replace("\\", "\\\\")
                out.append(f"[{body}]")
                i = end
        elif char == "{":
            end = segment.find("}", i)
            if end < 0:
                out.append(re.escape(char))
            else:
                options = segment[i + 1 : end].split(",")
                out.append("(?:" + "|".join(_translate_segment(opt) for opt in options) + ")")
                i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Compile a glob (``*``, ``?``, ``[..]``, ``{a,b}``, ``**`` for any depth) to a regex.

    The regex matches a whole ``/``-separated relative path.
    """
    segments = [seg for seg in pattern.split("/") if seg not in ("", ".")]
    parts: list[str] = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            parts.append(".*" if last else "(?:[^/]+/)*")
            continue
        parts.append(_translate_segment(segment) + ("" if last else "/"))
    try:
        return re.compile("".join(parts) + r"\Z", re.DOTALL)
    except re.error as exc:
        raise ToolError(f"pattern {pattern!r} is not a valid glob: {exc}") from None


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
    while len(segments) > 1 and not _MAGIC.search(segments[0]):
        literal.append(segments.pop(0))
    rest = [seg for seg in segments if seg not in ("", ".")]
    if ".." in rest:
        raise ToolError(f"pattern {pattern!r} may not use '..' after a wildcard")
    prefix = "/".join(literal)
    if pattern.startswith("/") and not prefix.startswith("/"):
        prefix = "/" + prefix
    depth = None if "**" in rest else max(len(rest), 1)
    return prefix, "/".join(rest), depth
