"""search and glob against patterns that would backtrack for ever in Python's ``re``.

Every hostile case here hangs (or takes hours) with a backtracking engine; with
RE2 it finishes at once, so a regression shows up as a test timeout. The
budget cases check that a walk or search that runs out of budget returns its
partial results with a note naming the budget.
"""

from __future__ import annotations

import io
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolprep.runtime.tools.base import ToolContext, ToolError
from toolprep.runtime.tools.budget import WorkBudget
from toolprep.runtime.tools.config import ToolConfig
from toolprep.runtime.tools.globs import glob_regex
from toolprep.runtime.tools.grep import BLOCK_BYTES, LinePattern, matching_lines
from toolprep.runtime.tools.listing import GlobTool
from toolprep.runtime.tools.patterns import MAX_PATTERN_CHARS
from toolprep.runtime.tools.search import SearchTool

pytestmark = pytest.mark.timeout(60)

# Long enough that a backtracking engine needs longer than the universe's age.
RUN = 200


def test_nested_quantifier_search_finishes_and_is_right(cwd: Path, ctx: ToolContext) -> None:
    (cwd / "run.txt").write_text("a" * 100_000 + "!\n" + "aaa\n" + "a" * RUN + "!\n")
    out = SearchTool().run({"pattern": "(a+)+$"}, ctx)
    assert out.llm_output == "run.txt:2:aaa"
    anchored = SearchTool().run({"pattern": r"\A(a+)+\z"}, ctx)
    assert anchored.llm_output == "run.txt:2:aaa"
    line_by_line = SearchTool().run({"pattern": r"(?-m)\A(a+)+\z"}, ctx)
    assert line_by_line.llm_output == "run.txt:2:aaa"


def test_backtracking_glob_against_a_long_file_name(cwd: Path, ctx: ToolContext) -> None:
    (cwd / ("a" * RUN)).write_text("needle\n")
    (cwd / ("a" * RUN + "b")).write_text("needle\n")
    hostile = "*a" * 12 + "*b"
    assert GlobTool().run({"pattern": hostile}, ctx).llm_output == "a" * RUN + "b"
    assert "No paths match" in GlobTool().run({"pattern": "*a" * 12 + "*c"}, ctx).llm_output
    searched = SearchTool().run({"pattern": "needle", "glob": hostile}, ctx)
    assert searched.llm_output == "a" * RUN + "b:1:needle"
    assert not glob_regex("**/" + hostile).match("d/" + "a" * RUN)


def test_deep_double_star_globs_on_a_deep_tree(cwd: Path, ctx: ToolContext) -> None:
    deep = cwd.joinpath(*["d"] * 60)
    deep.mkdir(parents=True)
    (deep / "x").write_text("bottom\n")
    rel = "/".join(["d"] * 60) + "/x"
    for pattern in ("**/**/**/**/**/**/x", "**/*/**/*/**/*/**/*/**/x", "**/d/**/d/**/d/**/x"):
        assert GlobTool().run({"pattern": pattern}, ctx).llm_output == rel
        assert "No paths match" in GlobTool().run({"pattern": pattern + "y"}, ctx).llm_output
    assert not glob_regex("**/*/**/*/**/*/**/*/**/y").match(rel)
    out = SearchTool().run({"pattern": "bottom", "glob": "**/**/**/**/**/x"}, ctx)
    assert out.llm_output == rel + ":1:bottom"


def test_glob_matches_names_that_are_not_utf8(cwd: Path, ctx: ToolContext) -> None:
    name = os.fsdecode(b"caf\xe9.txt")
    (cwd / name).write_text("x\n")
    assert GlobTool().run({"pattern": "*.txt"}, ctx).raw_output == {"count": 1, "truncated": False}
    assert SearchTool().run({"pattern": "x", "glob": "caf*"}, ctx).raw_output["matches"] == 1


def _wide_tree(cwd: Path, files: int) -> None:
    for i in range(files):
        (cwd / f"f{i:03d}.txt").write_text("hit\n")


def test_entry_budget_stops_glob_and_search_with_partial_results(
    cwd: Path, ctx: ToolContext
) -> None:
    for folder in ("a", "b"):
        (cwd / folder).mkdir()
        for i in range(8):
            (cwd / folder / f"f{i}.txt").write_text("hit\n")
    config = ToolConfig(max_walk_entries=10)  # a/, its 8 files, b/: then the budget is spent
    globbed = GlobTool(config).run({"pattern": "**/*.txt"}, ctx)
    lines = globbed.llm_output.splitlines()
    assert lines[:-1] == [f"a/f{i}.txt" for i in range(8)]
    assert lines[-1] == (
        "... stopped after visiting 10 files and directories (budget of 10 entries reached); "
        "results are partial, narrow the path or pattern"
    )
    assert globbed.raw_output["truncated"] is True
    assert globbed.raw_output["stopped"].startswith("stopped after visiting 10 files")
    searched = SearchTool(config).run({"pattern": "hit"}, ctx)
    assert searched.llm_output.splitlines()[:-1] == [f"a/f{i}.txt:1:hit" for i in range(8)]
    assert "budget of 10 entries reached" in searched.llm_output.splitlines()[-1]
    assert searched.raw_output["matches"] == 8 and searched.raw_output["truncated"] is True
    assert "stopped" not in SearchTool().run({"pattern": "hit"}, ctx).raw_output


def test_search_reads_stray_bytes_as_one_character(cwd: Path, ctx: ToolContext) -> None:
    (cwd / "latin1.txt").write_bytes(b"caf\xe9 au lait\r\nlast line without newline\r")
    out = SearchTool().run({"pattern": "caf. au"}, ctx)
    assert out.llm_output == "latin1.txt:1:caf\ufffd au lait"
    assert SearchTool().run({"pattern": "newline$"}, ctx).llm_output == (
        "latin1.txt:2:last line without newline"
    )


def test_byte_budget_stops_search_inside_a_file(cwd: Path, ctx: ToolContext) -> None:
    line = b"x" * 1023 + b"\n"
    (cwd / "big.txt").write_bytes(line * (3 * BLOCK_BYTES // len(line)) + b"hit\n")
    (cwd / "small.txt").write_text("hit\n")
    out = SearchTool(ToolConfig(max_search_bytes=BLOCK_BYTES)).run({"pattern": "hit"}, ctx)
    assert out.llm_output == (
        "No matches for 'hit' in the part searched: stopped after reading 262144 bytes "
        "(budget of 262144 bytes reached); results are partial, narrow the path or pattern."
    )
    assert out.raw_output["matches"] == 0 and "262144 bytes" in out.raw_output["stopped"]
    full = SearchTool().run({"pattern": "hit"}, ctx)
    assert full.llm_output.splitlines() == ["big.txt:769:hit", "small.txt:1:hit"]


def test_time_budget_stops_glob_and_search(cwd: Path, ctx: ToolContext) -> None:
    _wide_tree(cwd, 5)
    config = ToolConfig(max_walk_seconds=1e-9)
    for out in (
        GlobTool(config).run({"pattern": "**"}, ctx),
        SearchTool(config).run({"pattern": "hit"}, ctx),
    ):
        assert "time budget of 1e-09s reached" in out.llm_output
        assert "narrow the path or pattern" in out.llm_output


def test_time_budget_follows_a_tighter_tool_timeout(cwd: Path, make_ctx: Any) -> None:
    budget = WorkBudget.for_call(ToolConfig(max_walk_seconds=20), make_ctx(timeout=10.0))
    assert budget.seconds == pytest.approx(9.0)
    assert WorkBudget.for_call(ToolConfig(max_walk_seconds=20), make_ctx()).seconds == 20


def test_time_budget_is_checked_between_blocks_of_one_file(tmp_path: Path) -> None:
    data = tmp_path / "data.txt"
    data.write_bytes(b"miss\n" * (4 * BLOCK_BYTES // 5) + b"hit\n")
    ticks = iter(range(1_000_000))
    budget = WorkBudget(
        max_entries=10, max_bytes=10**9, seconds=2.5, clock=lambda: float(next(ticks))
    )
    with open(data, "rb") as handle:
        found = list(matching_lines(handle, LinePattern("hit"), budget, max_line_bytes=10**9))
    assert found == [] and budget.stopped == "time"
    assert budget.bytes_read < data.stat().st_size


def test_cancel_stops_a_long_search_between_blocks(cwd: Path, make_ctx: Any) -> None:
    bulk = cwd / "bulk.txt"
    bulk.write_bytes(b"a!\n" * 2_000_000)
    for i in range(20):
        os.link(bulk, cwd / f"copy{i:02d}.txt")
    cancelled = threading.Event()
    timer = threading.Timer(0.2, cancelled.set)
    timer.start()
    try:
        # (?-m) keeps this search line by line: seconds of work per file, far longer than 0.2s.
        with pytest.raises(ToolError, match="cancelled"):
            SearchTool().run({"pattern": r"(?-m)\A(a+)+$"}, make_ctx(cancelled=cancelled))
    finally:
        timer.cancel()


@pytest.mark.parametrize(
    ("pattern", "feature"),
    [
        (r"(a)\1", r"a backreference \1"),
        (r"(?P<n>a)(?P=n)", "a named backreference (?P=name)"),
        (r"\k<n>", r"a named backreference \k<name>"),
        ("a(?=b)", "lookahead (?=...)"),
        ("a(?!b)", "negative lookahead (?!...)"),
        ("(?<=a)b", "lookbehind (?<=...)"),
        ("(?<!a)b", "negative lookbehind (?<!...)"),
        ("(?>a+)b", "an atomic group (?>...)"),
        ("a++b", "a possessive quantifier ++"),
        ("(?(1)a|b)", "a conditional group"),
        (r"end\Z", r"\Z; use \z for the end of the text"),
        ("(?x) a b", "verbose mode (?x)"),
        ("(?a)x", "the inline flag (?a; RE2 knows only i, m, s and U"),
    ],
)
def test_unsupported_syntax_names_the_feature(
    cwd: Path, ctx: ToolContext, pattern: str, feature: str
) -> None:
    with pytest.raises(ToolError) as raised:
        SearchTool().run({"pattern": pattern}, ctx)
    message = str(raised.value)
    assert message.startswith(f"search: pattern {pattern!r} uses {feature}")
    assert "which RE2 does not support. Patterns use RE2 syntax" in message


def test_other_bad_patterns_get_specific_errors(cwd: Path, ctx: ToolContext) -> None:
    tool = SearchTool()
    with pytest.raises(ToolError, match=r"repeats too much \(\{1001\}\).*at most 1000"):
        tool.run({"pattern": "a{1001}"}, ctx)
    with pytest.raises(ToolError, match=r"not a valid regex \(RE2 syntax\): missing \)"):
        tool.run({"pattern": "(a"}, ctx)
    with pytest.raises(ToolError, match=f"over the limit of {MAX_PATTERN_CHARS}"):
        tool.run({"pattern": "a" * (MAX_PATTERN_CHARS + 1)}, ctx)
    with pytest.raises(ToolError, match="lone surrogate"):
        tool.run({"pattern": "\ud800"}, ctx)
    with pytest.raises(ToolError, match=r"not a valid glob: invalid character class range: z-a"):
        GlobTool().run({"pattern": "[z-a]*"}, ctx)
    with pytest.raises(ToolError, match=r"not a valid glob: it is .* over the limit"):
        GlobTool().run({"pattern": "*" * (MAX_PATTERN_CHARS + 1)}, ctx)


@pytest.mark.parametrize(
    ("source", "block"),
    [
        (r"\A(a+)+\z", "^(a+)+$"),
        (r"\\A[\\]\Q\A\z\E\z", r"\\A[\\]\Q\A\z\E$"),
        (r"[]z]\z[^]A]\A", r"[]z]$[^]A]^"),
        ("(?i-m)^a", None),
    ],
)
def test_block_pattern_rewrites_text_anchors_only_outside_classes_and_quotes(
    source: str, block: str | None
) -> None:
    pattern = LinePattern(source)
    if block is None:
        assert pattern.block is None
    else:
        assert pattern.block is not None and pattern.block.source == f"{block}"


def test_search_describes_re2_syntax_to_the_model() -> None:
    tool = SearchTool()
    assert "RE2 syntax" in tool.description
    assert "without backreferences, lookahead/lookbehind" in tool.description
    assert "RE2 syntax" in tool.parameters["properties"]["pattern"]["description"]


# Searching whole blocks must report exactly the lines a line-by-line search reports,
# including at CRLF endings, empty lines, for patterns that can match across lines, and
# for \A and \z, which the block search rewrites as ^ and $.
_PATTERNS = [
    "a",
    "^a",
    "a$",
    "^$",
    r"\bab\b",
    r"a\sb",
    r"a\nb",
    "(?s)a.b",
    "b*",
    r"\Aa",
    r"a\z",
    r"\A(a|b)+\z",
    r"\Aa|b\z",
    r"[\\]A|\\z|\Qa\E\z",
    "(?-m)^a",
    "(?i-m:^a)",
    "^(a|b)+$",
    r"\r",
]


@settings(max_examples=150, deadline=None)
@given(text=st.text(alphabet="ab \r\n", max_size=60), source=st.sampled_from(_PATTERNS))
def test_block_search_reports_what_a_line_search_reports(text: str, source: str) -> None:
    data = text.encode()
    pattern = LinePattern(source)
    expected = []
    lines = data.split(b"\n")
    if data.endswith(b"\n") or not data:
        lines.pop()
    for number, line in enumerate(lines, 1):
        line = line[:-1] if line.endswith(b"\r") else line
        if pattern.line.search(line) is not None:
            expected.append((number, line))
    budget = WorkBudget(max_entries=1, max_bytes=10**6, seconds=60)
    found = list(matching_lines(io.BytesIO(data), pattern, budget, max_line_bytes=10**6))
    assert found == expected
