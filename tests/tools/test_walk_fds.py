"""The descriptor walks close every descriptor they open, whichever way a call ends.

A walk holds one descriptor per directory on its path; a call that stops at
its cap, runs out of budget, is cancelled mid-walk or is refused must close
them all. Counting ``/proc/self/fd`` before and after many calls catches a
leak of even one descriptor on one of those paths.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from toolprep.runtime.tools.base import ToolContext, ToolError
from toolprep.runtime.tools.builtin import BuiltinTool
from toolprep.runtime.tools.config import ToolConfig
from toolprep.runtime.tools.files import ReadFileTool
from toolprep.runtime.tools.listing import GlobTool, ListDirectoryTool
from toolprep.runtime.tools.search import SearchTool
from toolprep.runtime.tools.walk import open_base, walk

ROUNDS = 100
_FDS = Path("/proc/self/fd")

pytestmark = pytest.mark.skipif(not _FDS.is_dir(), reason="needs /proc/self/fd")


def _open_fds() -> set[str]:
    return set(os.listdir(_FDS))


@pytest.fixture
def deep_tree(cwd: Path, outside: Path) -> Path:
    deep = cwd / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True)
    for level in (cwd / "a", cwd / "a" / "b", deep):
        for i in range(3):
            (level / f"f{i}.txt").write_text("needle\n" * 3)
    (cwd / "a" / "inside-link").symlink_to("b", target_is_directory=True)
    (cwd / "a" / "file-link").symlink_to("f0.txt")
    (cwd / "a" / "out-link").symlink_to(outside, target_is_directory=True)
    (cwd / "a" / "dangling").symlink_to("nowhere")
    (cwd / "a" / "loop").symlink_to("loop")
    os.mkfifo(cwd / "a" / "pipe")
    return cwd


def _calls(make_ctx: Any) -> list[tuple[BuiltinTool, dict[str, Any], ToolContext]]:
    ctx = make_ctx()
    small = ToolConfig(max_glob_results=1, max_search_results=1)
    budget = ToolConfig(max_walk_entries=6)
    return [
        (SearchTool(), {"pattern": "needle"}, ctx),
        (SearchTool(small), {"pattern": "needle"}, ctx),  # stops at the cap, deep in the tree
        (SearchTool(), {"pattern": "needle", "path": "a/f0.txt"}, ctx),
        (SearchTool(), {"pattern": "needle", "path": "a/pipe"}, ctx),
        (SearchTool(), {"pattern": "needle", "path": "a/out-link"}, ctx),  # refused
        (SearchTool(), {"pattern": "needle", "path": "missing"}, ctx),
        (GlobTool(), {"pattern": "**"}, ctx),
        (GlobTool(small), {"pattern": "**/*.txt"}, ctx),  # stops at the cap
        (GlobTool(), {"pattern": "a/b/**/*.txt"}, ctx),
        (GlobTool(), {"pattern": "missing/*"}, ctx),
        (GlobTool(), {"pattern": "*", "path": "a/f0.txt"}, ctx),  # not a directory
        (ListDirectoryTool(), {"path": "a"}, ctx),
        (ListDirectoryTool(), {"path": "a/out-link"}, ctx),  # refused
        (ReadFileTool(), {"path": "a/inside-link/f1.txt"}, ctx),
        (SearchTool(budget), {"pattern": "needle"}, ctx),  # budget spent, deep in the tree
    ]


def _run(tool: BuiltinTool, args: dict[str, Any], ctx: ToolContext) -> str:
    try:
        return tool.run(args, ctx).llm_output
    except ToolError as exc:
        return f"error: {exc}"


def test_no_descriptor_outlives_a_call(deep_tree: Path, make_ctx: Any) -> None:
    calls = _calls(make_ctx)
    # Warm up (imports and caches open what they keep), and check each call
    # ends the way it is meant to: at the cap, refused, or in full.
    first = [_run(*call) for call in calls]
    assert "stopped after 1 matches" in first[1] and "more than 1 matches" in first[7]
    assert "budget of 6 entries reached" in first[14]
    assert [i for i, out in enumerate(first) if out.startswith("error:")] == [4, 5, 10, 12]
    before = _open_fds()
    for _ in range(ROUNDS):
        for call in calls:
            _run(*call)
    leaked = _open_fds() - before
    assert not leaked, f"{len(leaked)} descriptors left open"


def test_a_walk_cancelled_deep_in_the_tree_closes_its_descriptors(
    deep_tree: Path, cwd: Path
) -> None:
    before = _open_fds()
    for _ in range(ROUNDS):
        cancelled = threading.Event()
        depth_reached = 0
        with open_base(".", cwd, "test") as base, pytest.raises(ToolError, match="cancelled"):
            for entry in walk(base, cwd, cancelled=cancelled):
                depth_reached = max(depth_reached, entry.rel.count("/"))
                if depth_reached == 4:  # a/b/c/d/f0.txt: five directories open
                    cancelled.set()
        assert depth_reached == 4
    leaked = _open_fds() - before
    assert not leaked, f"{len(leaked)} descriptors left open"
