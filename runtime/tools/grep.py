"""The lines of one file that match a pattern, found block by block.

A Python loop over every line costs a couple of microseconds a line while
holding the interpreter lock, which is what makes a large search both slow
and a burden on every other session. So the file is read in blocks of whole
lines and RE2 first searches each block in multi-line mode: one C call, run
without the interpreter lock, over a quarter of a megabyte. Only the lines
where it reports a match are then checked on their own, so what is reported
is exactly what a line-by-line search would report. Between blocks (and
every few thousand candidate lines) the work budget is checked, so a cancel
or a spent budget is seen within one block.

A line is the bytes before its ``\\n``, less one ``\\r`` before that.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from toolprep.runtime.tools.budget import WorkBudget
from toolprep.runtime.tools.patterns import Regex, compile_regex

BLOCK_BYTES = 256 * 1024
_CHECK_EVERY = 4096  # lines (or candidate lines) between budget checks within a block

# Searching a block in multi-line mode finds every line match only if the
# pattern cannot tell a line's start or end from the text's. ``\A`` and ``\z``
# can, so in the block pattern they become ``^`` and ``$``, which in
# multi-line mode mean exactly what ``\A`` and ``\z`` mean on a single line.
# A flag group that turns multi-line mode off cannot be rewritten like that;
# such patterns (and, harmlessly, a few look-alikes) are matched line by line.
_MULTILINE_OFF = compile_regex(r"\(\?[imsU]*-")
_TEXT_ANCHORS = {"A": "^", "z": "$"}


def _with_line_anchors(source: str) -> str:
    """``source`` with ``\\A``/``\\z`` rewritten as ``^``/``$``.

    Only where they are anchors: not inside a character class, nor inside
    ``\\Q...\\E`` quoted text.
    """
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(source):
        char = source[i]
        if source.startswith("\\Q", i) and not in_class:
            end = source.find("\\E", i + 2)
            end = len(source) if end < 0 else end + 2
            out.append(source[i:end])
            i = end
            continue
        if char == "\\" and i + 1 < len(source):
            follower = source[i + 1]
            anchor = None if in_class else _TEXT_ANCHORS.get(follower)
            out.append(anchor if anchor is not None else char + follower)
            i += 2
            continue
        if char == "[" and not in_class:
            in_class = True
            out.append(char)
            i += 1
            if source[i : i + 1] == "^":
                out.append("^")
                i += 1
            if source[i : i + 1] == "]":  # a leading ']' is a member, not the end
                out.append("]")
                i += 1
            continue
        if char == "]" and in_class:
            in_class = False
        out.append(char)
        i += 1
    return "".join(out)


class LinePattern:
    """A search pattern compiled for single lines and, where equivalent, for whole blocks."""

    __slots__ = ("block", "line")

    def __init__(self, source: str) -> None:
        self.line: Regex = compile_regex(source)
        self.block: Regex | None = None
        if _MULTILINE_OFF.search(source.encode("utf-8")) is None:
            self.block = compile_regex(_with_line_anchors(source), multiline=True)


def matching_lines(
    handle: BinaryIO, pattern: LinePattern, budget: WorkBudget, *, max_line_bytes: int
) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, line) for each matching line of ``handle``, in order.

    Stops early, leaving ``budget.stopped`` set, when the budget runs out.
    ``max_line_bytes`` bounds the read that completes a block's last line.
    """
    lines_before = 0
    while True:
        wanted = budget.allowance(BLOCK_BYTES)
        if wanted == 0:
            return
        block = handle.read(wanted)
        if not block:
            return
        if not block.endswith(b"\n"):
            block += handle.readline(max_line_bytes)
        budget.charge(len(block))
        block = _normalized(block)
        hits = _block_hits if pattern.block is not None else _line_hits
        for index, line in hits(block, pattern, budget):
            yield lines_before + index + 1, line
        if budget.stopped is not None:
            return
        lines_before += block.count(b"\n")


def _normalized(block: bytes) -> bytes:
    """``block`` as valid UTF-8 ending in ``\\n``, with ``\\r\\n`` line ends made ``\\n``.

    RE2 matches UTF-8, in which a stray byte (a Latin-1 file, say) matches
    neither ``.`` nor any class; as U+FFFD it is one character like any other.
    A final line without its newline gets one, so every line ends alike.
    """
    try:
        block.decode("utf-8")
    except UnicodeDecodeError:
        block = block.decode("utf-8", errors="replace").encode("utf-8")
    if not block.endswith(b"\n"):
        block += b"\n"
    if b"\r\n" in block:
        block = block.replace(b"\r\n", b"\n")
    return block


def _block_hits(
    block: bytes, pattern: LinePattern, budget: WorkBudget
) -> Iterator[tuple[int, bytes]]:
    """Matching lines of ``block`` (0-based index in the block), via block-wide searches."""
    assert pattern.block is not None
    end = len(block) - 1  # the newline that ends the last line
    pos = 0  # always the start of a line
    index = 0  # the index of the line starting at ``pos``
    candidates = 0
    while pos <= end:
        start = pattern.block.search(block, pos)
        if start is None or start > end:
            return
        previous_newline = block.rfind(b"\n", pos, start)
        line_start = pos if previous_newline < 0 else previous_newline + 1
        line_end = block.find(b"\n", start)
        index += block.count(b"\n", pos, line_start)
        line = block[line_start:line_end]
        if pattern.line.search(line) is not None:
            yield index, line
        candidates += 1
        if candidates % _CHECK_EVERY == 0 and not budget.running():
            return
        pos = line_end + 1
        index += 1


def _line_hits(
    block: bytes, pattern: LinePattern, budget: WorkBudget
) -> Iterator[tuple[int, bytes]]:
    """Matching lines of ``block`` (0-based index in the block), one search per line."""
    lines = block.split(b"\n")
    lines.pop()  # the empty text after the final newline
    for index, line in enumerate(lines):
        if index % _CHECK_EVERY == _CHECK_EVERY - 1 and not budget.running():
            return
        if pattern.line.search(line) is not None:
            yield index, line
