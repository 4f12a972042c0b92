"""Glob patterns compiled to RE2, shared by glob and search.

Globs compile to RE2, not to Python regexes: a glob like ``*a*a*a*a*b`` or
``**/**/**/x`` translates to a regex that backtracks exponentially in
Python's engine, and RE2 matches it in time linear in the path.
"""

from __future__ import annotations

import os

from toolprep.runtime.tools.base import ToolError
from toolprep.runtime.tools.patterns import (
    MAX_PATTERN_CHARS,
    Regex,
    RegexSyntaxError,
    compile_regex,
    escape,
    quoted,
)

__all__ = ["Glob", "glob_regex", "split_glob"]

_MAGIC = frozenset("*?[{")
# A glob character becomes at most this many regex characters (``*`` -> ``[^/]*``).
_EXPANSION = 6


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
