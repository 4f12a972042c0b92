"""Regular expressions whose matching time is linear in the input: RE2.

Python's ``re`` backtracks, so ``(a+)+$`` against a long run of ``a`` followed
by one other character takes exponential time, inside a single C call that
holds the interpreter lock: no other session is served, no cancel is seen.
RE2 never backtracks (time is linear in the subject) and releases the lock
while it matches, so a hostile pattern costs only its own tool call a little
time. The price is syntax: RE2 has no backreferences, lookaround, atomic
groups or possessive quantifiers, and this module turns RE2's terse parse
errors into a message that names the feature and the way round it.

Subjects are bytes: file contents are searched undecoded, and paths are
encoded with ``os.fsencode`` so that names which are not valid UTF-8 still
match instead of raising.
"""

from __future__ import annotations

from typing import Any

import re2  # type: ignore[import-untyped,unused-ignore]  # the package ships no stubs

from toolprep.runtime.tools.base import ToolError

RE2_SYNTAX_URL = "https://github.com/google/re2/wiki/Syntax"

#: RE2 compiles in time linear in the pattern, but without releasing the
#: interpreter lock; a few megabytes of pattern would stall the process for
#: most of a second only to be refused as too large. No useful search pattern
#: comes near this length.
MAX_PATTERN_CHARS = 16 * 1024
_QUOTED_CHARS = 200

# What RE2 reports (the text after "invalid perl operator: ", "invalid escape
# sequence: " or "bad repetition operator: ") mapped to the feature's name and,
# where one exists, the RE2 way to say the same thing.
_PERL_OPERATORS: dict[str, str] = {
    "(?=": "lookahead (?=...)",
    "(?!": "negative lookahead (?!...)",
    "(?<=": "lookbehind (?<=...)",
    "(?<!": "negative lookbehind (?<!...)",
    "(?>": "an atomic group (?>...); use a plain group (...)",
    "(?(": "a conditional group (?(...)...)",
    "(?#": "a comment group (?#...)",
    "(?|": "a branch-reset group (?|...)",
    "(?R": "recursion (?R)",
    "(?x": "verbose mode (?x); write the pattern without extra spaces",
}
_ESCAPES: dict[str, str] = {
    "\\Z": "\\Z; use \\z for the end of the text",
    "\\g": "a backreference or subroutine \\g",
    "\\k": "a named backreference \\k<name>",
    "\\K": "\\K (keep out)",
    "\\G": "\\G (end of previous match)",
    "\\R": "\\R; use \\r?\\n",
    "\\h": "\\h; use [\\t ]",
    "\\u": "\\uXXXX; use \\x{XXXX}",
    "\\N": "\\N{name}; use \\x{XXXX}",
    "\\e": "\\e; use \\x1b",
    "\\c": "a control escape \\cX; use \\x{XX}",
}


class RegexSyntaxError(ToolError):
    """A pattern RE2 cannot compile; the message says why and what to write instead.

    ``detail`` is RE2's own short reason, for callers (globs) that word the
    message themselves.
    """

    def __init__(self, message: str, detail: str) -> None:
        super().__init__(message)
        self.detail = detail


class Regex:
    """A compiled RE2 expression, matched against bytes."""

    __slots__ = ("_compiled", "source")

    def __init__(self, source: str, compiled: Any) -> None:
        self.source = source
        self._compiled = compiled

    def search(self, subject: bytes, pos: int = 0) -> int | None:
        """Where the leftmost match at or after ``pos`` starts, or None."""
        found = self._compiled.search(subject, pos)
        return None if found is None else int(found.start())

    def fullmatch(self, subject: bytes) -> bool:
        return self._compiled.fullmatch(subject) is not None


def compile_regex(
    source: str, *, multiline: bool = False, max_chars: int = MAX_PATTERN_CHARS
) -> Regex:
    """Compile ``source`` with RE2, or raise RegexSyntaxError naming the problem.

    ``multiline`` makes ``^`` and ``$`` match at line boundaries. Captures are
    off: callers only ask whether and where a match starts, which lets RE2
    answer with its fastest engine. ``max_chars`` lets a caller that
    generates the regex (globs) allow for the expansion of its own syntax.
    """
    if len(source) > max_chars:
        detail = f"it is {len(source)} characters long, over the limit of {max_chars}"
        raise RegexSyntaxError(f"pattern {quoted(source)}: {detail}", detail)
    options = re2.Options()
    options.log_errors = False  # RE2 would otherwise print every bad pattern to stderr
    options.never_capture = True
    text = f"(?m){source}" if multiline else source
    try:
        compiled = re2.compile(text, options)
    except UnicodeEncodeError:
        detail = "it contains a lone surrogate, which is not valid text"
        raise RegexSyntaxError(f"pattern {quoted(source)}: {detail}", detail) from None
    except re2.error as exc:
        detail = _detail(exc)
        raise RegexSyntaxError(explain(source, detail), detail) from None
    return Regex(source, compiled)


def _detail(exc: Exception) -> str:
    raw = exc.args[0] if exc.args else ""
    return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)


def explain(source: str, detail: str) -> str:
    """A message for RE2's parse error ``detail`` on ``source``, naming unsupported features."""
    kind, _, where = detail.partition(": ")
    feature: str | None = None
    if kind == "invalid perl operator":
        if where == "(?P":
            feature = "a named backreference (?P=name)" if "(?P=" in source else None
        else:
            feature = _PERL_OPERATORS.get(where)
            if feature is None and where.startswith("(?"):
                feature = f"the inline flag {where}; RE2 knows only i, m, s and U"
    elif kind == "invalid escape sequence":
        backreference = where[1:2].isdigit()
        feature = f"a backreference {where}" if backreference else _ESCAPES.get(where[:2])
    elif kind == "bad repetition operator" and where.endswith("+") and len(where) > 1:
        feature = f"a possessive quantifier {where}; drop the trailing '+'"
    elif kind == "invalid repetition size":
        return (
            f"pattern {quoted(source)} repeats too much ({where}): RE2 allows at most 1000 "
            "repetitions, nesting included"
        )
    elif kind.startswith("pattern too large"):
        return f"pattern {quoted(source)} is too large for RE2 to compile; simplify it"
    if feature is not None:
        return (
            f"pattern {quoted(source)} uses {feature}, which RE2 does not support. Patterns use "
            f"RE2 syntax: no backreferences, lookahead/lookbehind, atomic groups or "
            f"possessive quantifiers ({RE2_SYNTAX_URL})"
        )
    return f"pattern {quoted(source)} is not a valid regex (RE2 syntax): {detail}"


def quoted(source: str) -> str:
    """``source`` as quoted in an error message, cut if long."""
    if len(source) > _QUOTED_CHARS:
        source = source[:_QUOTED_CHARS] + "…"
    return repr(source)


def escape(literal: str) -> str:
    """``literal`` as an RE2 pattern that matches exactly it."""
    escaped: str = re2.escape(literal)
    return escaped
