"""The descriptor walk behind the file tools: which symlinks it honours and which it refuses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from toolprep.runtime.tools.base import ToolContext, ToolError
from toolprep.runtime.tools.confined_fs import (
    MAX_LINK_HOPS,
    make_directories,
    open_for_reading,
    open_for_writing,
)
from toolprep.runtime.tools.files import ReadFileTool, WriteFileTool


def _read(path: str, cwd: Path) -> bytes:
    fd = open_for_reading(path, cwd)
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def test_inside_symlinks_relative_and_absolute_are_followed(cwd: Path) -> None:
    (cwd / "a" / "b").mkdir(parents=True)
    (cwd / "a" / "b" / "f.txt").write_text("found")
    (cwd / "rel").symlink_to("a/b", target_is_directory=True)
    (cwd / "a" / "up").symlink_to("../a/b", target_is_directory=True)
    (cwd / "abs").symlink_to(cwd / "a" / "b" / "f.txt")
    (cwd / "chain").symlink_to("abs")
    for path in ("rel/f.txt", "a/up/f.txt", "abs", "chain", "a/up/../b/f.txt"):
        assert _read(path, cwd) == b"found", path


def test_links_leading_out_are_refused_naming_the_path(cwd: Path, outside: Path) -> None:
    (cwd / "sub").mkdir()
    (cwd / "sub" / "climb").symlink_to("../../outside", target_is_directory=True)
    (cwd / "abs-out").symlink_to(outside / "secret.txt")
    for path in ("sub/climb/secret.txt", "abs-out"):
        with pytest.raises(ToolError, match="symlink") as err:
            _read(path, cwd)
        assert repr(path) in str(err.value)


def test_symlink_loop_is_refused(cwd: Path) -> None:
    (cwd / "x").symlink_to("y")
    (cwd / "y").symlink_to("x")
    with pytest.raises(ToolError, match=f"more than {MAX_LINK_HOPS} symlinks"):
        _read("x", cwd)


def test_cwd_reached_through_a_symlink_is_walked(tmp_path: Path, cwd: Path) -> None:
    via = tmp_path / "via"
    via.symlink_to(cwd, target_is_directory=True)
    (cwd / "a.txt").write_text("a")
    assert _read("a.txt", via) == b"a"
    assert _read(str(cwd / "a.txt"), via) == b"a"


def test_write_creates_parents_and_reports_creation(cwd: Path) -> None:
    (cwd / "real").mkdir()
    (cwd / "alias").symlink_to("real", target_is_directory=True)
    first = open_for_writing("alias/new/deep.txt", cwd)
    os.close(first.fd)
    again = open_for_writing("alias/new/deep.txt", cwd)
    os.close(again.fd)
    assert (first.created, again.created) == (True, False)
    assert (cwd / "real" / "new" / "deep.txt").is_file()
    make_directories("alias/made/here", cwd)
    assert (cwd / "real" / "made" / "here").is_dir()


def test_write_through_a_dangling_inside_link_creates_its_target(cwd: Path) -> None:
    (cwd / "later.txt").symlink_to("target.txt")
    opened = open_for_writing("later.txt", cwd)
    os.close(opened.fd)
    assert opened.created and (cwd / "target.txt").is_file()


def test_fifo_is_refused_without_blocking(cwd: Path, ctx: ToolContext) -> None:
    os.mkfifo(cwd / "pipe")
    with pytest.raises(ToolError, match="'pipe' is not a regular file"):
        ReadFileTool().run({"path": "pipe"}, ctx)
    with pytest.raises(ToolError, match="'pipe' is not a regular file"):
        WriteFileTool().run({"path": "pipe", "content": "x"}, ctx)
