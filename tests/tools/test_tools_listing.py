"""list_directory, glob and search over a real tree."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from toolprep.runtime.tools.base import ToolContext, ToolError
from toolprep.runtime.tools.config import ToolConfig
from toolprep.runtime.tools.globs import glob_regex
from toolprep.runtime.tools.listing import GlobTool, ListDirectoryTool
from toolprep.runtime.tools.search import SearchTool

Validate = Any


@pytest.fixture
def tree(cwd: Path, outside: Path) -> Path:
    (cwd / "src" / "pkg").mkdir(parents=True)
    (cwd / "src" / "main.py").write_text("import os\nprint('hello')\n")
    (cwd / "src" / "pkg" / "util.py").write_text("def hello():\n    return 'hello world'\n")
    (cwd / "src" / "pkg" / "notes.md").write_text("hello in markdown\n")
    (cwd / "README.md").write_text("# hello\n")
    (cwd / "logo.png").write_bytes(b"\x89PNG\x00\x00hello\x00")
    (cwd / ".git").mkdir()
    (cwd / ".git" / "config").write_text("hello = git\n")
    (cwd / "escape").symlink_to(outside, target_is_directory=True)
    (cwd / "secret-link").symlink_to(outside / "secret.txt")
    (outside / "hello.py").write_text("hello from outside\n")
    return cwd


def _content_text(out: Any) -> str:
    return "\n".join(item["content"]["text"] for item in out.content)


def test_list_directory(tree: Path, ctx: ToolContext, acp_validate: Validate) -> None:
    tool = ListDirectoryTool()
    (tree / "alias").symlink_to("src", target_is_directory=True)
    out = tool.run({}, ctx)
    lines = out.llm_output.splitlines()[1:]
    # A link into cwd reads as the directory it leads to; one leading out is named, not followed.
    assert lines[:3] == [".git/", "alias/ -> src", "src/"]
    assert f"escape -> {tree.parent / 'outside'} (outside the working directory)" in lines
    assert "README.md (8 bytes)" in lines
    for item in out.content:
        acp_validate("ToolCallContent", item)
    sub = tool.run({"path": "src"}, ctx)
    assert sub.llm_output.splitlines()[1:] == ["pkg/", "main.py (25 bytes)"]
    assert tool.title({"path": "src"}) == "List src"
    assert tool.title({}) == "List ."
    [loc] = tool.locations({"path": "src"}, tree)
    acp_validate("ToolCallLocation", loc)
    with pytest.raises(ToolError, match="escape"):
        tool.run({"path": "escape"}, ctx)
    with pytest.raises(ToolError, match="not a directory"):
        tool.run({"path": "README.md"}, ctx)


def test_list_directory_caps_entries(cwd: Path, ctx: ToolContext) -> None:
    for i in range(30):
        (cwd / f"f{i:02d}").write_text("")
    out = ListDirectoryTool(ToolConfig(max_list_entries=10)).run({}, ctx)
    assert "and 20 more entries" in out.llm_output
    assert out.raw_output == {"path": str(cwd), "entries": 30, "truncated": True}


def test_glob_patterns(tree: Path, ctx: ToolContext, acp_validate: Validate) -> None:
    tool = GlobTool()
    assert tool.kind == "search"
    assert tool.run({"pattern": "**/*.py"}, ctx).llm_output.splitlines() == [
        "src/main.py",
        "src/pkg/util.py",
    ]
    assert tool.run({"pattern": "*.md"}, ctx).llm_output == "README.md"
    assert tool.run({"pattern": "src/**/*.{md,py}"}, ctx).llm_output.splitlines() == [
        "src/main.py",
        "src/pkg/notes.md",
        "src/pkg/util.py",
    ]
    assert tool.run({"pattern": "*.py", "path": "src/pkg"}, ctx).llm_output == "src/pkg/util.py"
    assert tool.run({"pattern": str(tree / "src" / "*.py")}, ctx).llm_output == "src/main.py"
    assert tool.run({"pattern": "s?c/"}, ctx).llm_output == "src/"
    out = tool.run({"pattern": "*.nothing"}, ctx)
    assert "No paths match" in out.llm_output
    for item in out.content:
        acp_validate("ToolCallContent", item)


def test_glob_never_leaves_cwd(tree: Path, ctx: ToolContext) -> None:
    tool = GlobTool()
    everything = tool.run({"pattern": "**"}, ctx).llm_output.splitlines()
    assert not any("hello.py" in line or ".git" in line for line in everything)
    assert "escape/" not in everything  # links leading outside are dropped, not followed
    assert "secret-link" not in everything
    for pattern in ("../outside/*", str(tree.parent / "outside" / "*"), "escape/*"):
        with pytest.raises(ToolError):
            tool.run({"pattern": pattern}, ctx)
    with pytest.raises(ToolError, match=r"'\.\.'"):
        tool.run({"pattern": "*/../../outside/*"}, ctx)


def test_glob_caps_results(cwd: Path, ctx: ToolContext) -> None:
    for i in range(20):
        (cwd / f"{i:02d}.txt").write_text("")
    out = GlobTool(ToolConfig(max_glob_results=5)).run({"pattern": "*.txt"}, ctx)
    assert out.llm_output.splitlines()[:5] == ["00.txt", "01.txt", "02.txt", "03.txt", "04.txt"]
    assert "more than 5 matches" in out.llm_output


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("*.py", "a.py", True),
        ("*.py", "d/a.py", False),
        ("**/*.py", "a.py", True),
        ("**/*.py", "d/e/a.py", True),
        ("d/**", "d/e/f", True),
        ("[ab].txt", "b.txt", True),
        ("[!ab].txt", "b.txt", False),
        ("*.{js,ts}", "x.ts", True),
        ("a+b(c).txt", "a+b(c).txt", True),
    ],
)
def test_glob_regex(pattern: str, path: str, expected: bool) -> None:
    assert bool(glob_regex(pattern).match(path)) is expected


def test_search_finds_matches_grep_style(
    tree: Path, ctx: ToolContext, acp_validate: Validate
) -> None:
    tool = SearchTool()
    out = tool.run({"pattern": "hello"}, ctx)
    assert out.llm_output.splitlines() == [
        "README.md:1:# hello",
        "src/main.py:2:print('hello')",
        "src/pkg/notes.md:1:hello in markdown",
        "src/pkg/util.py:1:def hello():",
        "src/pkg/util.py:2:    return 'hello world'",
    ]  # no .git, no binary logo.png, nothing through the escaping links
    assert out.raw_output == {"matches": 5, "files": 4, "truncated": False}
    for item in out.content:
        acp_validate("ToolCallContent", item)
    [loc] = tool.locations({"pattern": "x"}, tree)
    acp_validate("ToolCallLocation", loc)
    assert tool.kind == "search"


def test_search_path_glob_and_single_file(tree: Path, ctx: ToolContext) -> None:
    tool = SearchTool()
    assert tool.run({"pattern": r"hel+o", "glob": "*.py"}, ctx).llm_output.splitlines() == [
        "src/main.py:2:print('hello')",
        "src/pkg/util.py:1:def hello():",
        "src/pkg/util.py:2:    return 'hello world'",
    ]
    assert tool.run({"pattern": "world", "path": "src/pkg"}, ctx).llm_output == (
        "src/pkg/util.py:2:    return 'hello world'"
    )
    assert tool.run({"pattern": "^import", "path": "src/main.py"}, ctx).llm_output == (
        "src/main.py:1:import os"
    )
    assert tool.run(
        {"pattern": "(?i)HELLO", "glob": "pkg/*.md", "path": "src"}, ctx
    ).llm_output == ("src/pkg/notes.md:1:hello in markdown")
    assert "No matches" in tool.run({"pattern": "zzz"}, ctx).llm_output


def test_search_caps_results_and_long_lines(cwd: Path, ctx: ToolContext) -> None:
    (cwd / "many.txt").write_text("match " + "x" * 1000 + "\n" + "match\n" * 50)
    out = SearchTool(ToolConfig(max_search_results=10, max_search_line_chars=40)).run(
        {"pattern": "match"}, ctx
    )
    lines = out.llm_output.splitlines()
    assert len(lines) == 11 and "stopped after 10 matches" in lines[-1]
    assert len(lines[0]) <= len("many.txt:1:") + 40
    assert out.raw_output["truncated"] is True


def test_search_errors(tree: Path, ctx: ToolContext) -> None:
    tool = SearchTool()
    with pytest.raises(ToolError, match="not a valid regex"):
        tool.run({"pattern": "("}, ctx)
    with pytest.raises(ToolError, match="escape"):
        tool.run({"pattern": "x", "path": "escape"}, ctx)
    with pytest.raises(ToolError, match="does not exist"):
        tool.run({"pattern": "x", "path": "nope"}, ctx)


def test_search_stops_when_cancelled(tree: Path, make_ctx: Any) -> None:
    cancelled = threading.Event()
    cancelled.set()
    with pytest.raises(ToolError, match="cancelled"):
        SearchTool().run({"pattern": "hello"}, make_ctx(cancelled=cancelled))
