"""Every file tool against a directory swapped with an outside symlink by another process.

``inside/sub`` and ``spare`` are exchanged atomically (``renameat2``) by a
separate process, again and again: at each instant one is a real directory
of the session and the other a symlink to a directory outside it, holding a
file with a unique name and unique content. Each tool is called hundreds of
times while that runs, and no result may ever show that name or that
content. Each call starts only once the flipper has swapped again since the
last one, so the calls meet both states; a tool that checks a path and then
walks or opens it by name leaks in a few hundred calls.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.tools.dir_flipper import flipping
from toolprep.runtime.tools.base import ToolContext, ToolError
from toolprep.runtime.tools.builtin import BuiltinTool
from toolprep.runtime.tools.files import ReadFileTool
from toolprep.runtime.tools.listing import GlobTool, ListDirectoryTool
from toolprep.runtime.tools.search import SearchTool

CALLS = 1000
OUTSIDE_NAME = "zqoutname7f3"
OUTSIDE_BYTES = "zqoutbytes91c"


@pytest.fixture
def swapped(cwd: Path, outside: Path) -> tuple[Path, Path]:
    """``inside/sub`` (a real directory) and ``spare`` (a link outside), to be exchanged."""
    sub = cwd / "inside" / "sub"
    sub.mkdir(parents=True)
    (sub / "inner.txt").write_text("inside inner\n")
    (cwd / "inside" / "keep.txt").write_text("inside keep\n")
    (outside / f"{OUTSIDE_NAME}.txt").write_text(f"{OUTSIDE_BYTES}\n")
    (outside / "inner.txt").write_text(f"{OUTSIDE_BYTES} inner\n")
    (outside / "deeper").mkdir()
    (outside / "deeper" / f"{OUTSIDE_NAME}.md").write_text(f"{OUTSIDE_BYTES} deeper\n")
    spare = cwd / "spare"
    spare.symlink_to(outside, target_is_directory=True)
    return sub, spare


# A pattern that finds the outside content without spelling it (the pattern is echoed).
_FIND = OUTSIDE_BYTES[:5] + "." + OUTSIDE_BYTES[6:] + "|inside"

CASES: list[tuple[str, Callable[[], BuiltinTool], dict[str, Any]]] = [
    ("search-tree", SearchTool, {"pattern": _FIND}),
    ("search-in-swapped", SearchTool, {"pattern": _FIND, "path": "inside/sub"}),
    ("search-file-in-swapped", SearchTool, {"pattern": _FIND, "path": "inside/sub/inner.txt"}),
    ("search-glob", SearchTool, {"pattern": _FIND, "glob": "**/*.{txt,md}"}),
    ("list-swapped", ListDirectoryTool, {"path": "inside/sub"}),
    ("glob-tree", GlobTool, {"pattern": "**"}),
    ("glob-in-swapped", GlobTool, {"pattern": "inside/sub/**"}),
    ("glob-path-swapped", GlobTool, {"pattern": "*", "path": "inside/sub"}),
    ("read-through-swapped", ReadFileTool, {"path": "inside/sub/inner.txt"}),
]


@pytest.mark.parametrize(("make", "args"), [case[1:] for case in CASES], ids=[c[0] for c in CASES])
def test_no_outside_name_or_byte_ever_shows(
    cwd: Path,
    swapped: tuple[Path, Path],
    ctx: ToolContext,
    make: Callable[[], BuiltinTool],
    args: dict[str, Any],
) -> None:
    sub, spare = swapped
    tool = make()
    leaks: list[str] = []
    outcomes: set[str] = set()
    with flipping(sub, spare, cwd.parent / "flips") as flipper:
        seen = 0
        for _ in range(CALLS):
            seen = flipper.wait_past(seen)
            try:
                out = tool.run(args, ctx)
                shown = f"{out.llm_output}\n{out.content}\n{out.raw_output}"
            except ToolError as exc:
                shown = f"error: {exc}"
            outcomes.add(shown)
            if OUTSIDE_NAME in shown or OUTSIDE_BYTES in shown:
                leaks.append(shown)
    assert leaks == [], f"{len(leaks)} of {CALLS} calls showed the outside: {leaks[0][:500]}"
    # Every call came after a fresh swap, and the calls met the swapped directory
    # in more than one state: the race really ran.
    assert len(outcomes) >= 2, outcomes
