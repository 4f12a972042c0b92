"""Confinement of model-supplied paths to the session cwd."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from toolprep.runtime.tools.base import ToolError
from toolprep.runtime.tools.paths import display_path, is_confined, resolve_path, title_path


def test_relative_path_resolves_inside_cwd(cwd: Path) -> None:
    assert resolve_path("src/a.py", cwd) == cwd / "src" / "a.py"
    assert resolve_path("./src//a.py", cwd) == cwd / "src" / "a.py"
    assert resolve_path(".", cwd) == cwd


def test_absolute_path_inside_cwd_is_allowed(cwd: Path) -> None:
    assert resolve_path(str(cwd / "a.txt"), cwd) == cwd / "a.txt"


def test_dotdot_that_stays_inside_is_allowed(cwd: Path) -> None:
    (cwd / "src").mkdir()
    assert resolve_path("src/../a.txt", cwd) == cwd / "a.txt"


@pytest.mark.parametrize("path", ["../outside/secret.txt", "..", "src/../../outside", "a/../../.."])
def test_dotdot_escape_is_rejected(cwd: Path, path: str) -> None:
    with pytest.raises(ToolError, match=r"escapes the session directory") as err:
        resolve_path(path, cwd)
    assert repr(path) in str(err.value)


def test_absolute_path_outside_is_rejected(cwd: Path, outside: Path) -> None:
    target = str(outside / "secret.txt")
    with pytest.raises(ToolError, match="is outside the session directory") as err:
        resolve_path(target, cwd)
    assert target in str(err.value)
    with pytest.raises(ToolError, match="outside"):
        resolve_path("/etc/passwd", cwd)


def test_sibling_with_common_prefix_is_outside(cwd: Path) -> None:
    sibling = cwd.parent / (cwd.name + "-evil")
    sibling.mkdir()
    with pytest.raises(ToolError, match="outside"):
        resolve_path(str(sibling / "x"), cwd)


def test_symlinked_file_escaping_is_rejected(cwd: Path, outside: Path) -> None:
    (cwd / "link.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(ToolError, match="symlink") as err:
        resolve_path("link.txt", cwd)
    assert "'link.txt'" in str(err.value)


def test_symlinked_dir_escaping_is_rejected_for_existing_and_new_files(
    cwd: Path, outside: Path
) -> None:
    (cwd / "linkdir").symlink_to(outside, target_is_directory=True)
    for path in ("linkdir/secret.txt", "linkdir/new.txt", "linkdir/deeper/new.txt", "linkdir"):
        with pytest.raises(ToolError, match="symlink"):
            resolve_path(path, cwd)


def test_dangling_symlink_pointing_outside_is_rejected(cwd: Path, outside: Path) -> None:
    (cwd / "dangling").symlink_to(outside / "does-not-exist")
    with pytest.raises(ToolError, match="symlink"):
        resolve_path("dangling", cwd)


def test_symlink_inside_cwd_is_allowed(cwd: Path) -> None:
    (cwd / "real").mkdir()
    (cwd / "real" / "f.txt").write_text("x")
    (cwd / "alias").symlink_to(cwd / "real", target_is_directory=True)
    (cwd / "f-link").symlink_to(cwd / "real" / "f.txt")
    assert resolve_path("alias/f.txt", cwd) == cwd / "alias" / "f.txt"
    assert resolve_path("f-link", cwd) == cwd / "f-link"
    assert is_confined(cwd / "alias" / "f.txt", cwd)


def test_cwd_reached_through_a_symlink_still_works(tmp_path: Path, cwd: Path) -> None:
    via = tmp_path / "via"
    via.symlink_to(cwd, target_is_directory=True)
    (cwd / "a.txt").write_text("a")
    assert resolve_path("a.txt", via) == via / "a.txt"
    assert resolve_path(str(cwd / "a.txt"), via) == cwd / "a.txt"
    with pytest.raises(ToolError):
        resolve_path("../outside/secret.txt", via)


@pytest.mark.parametrize("bad", ["", "   ", "a\0b"])
def test_empty_or_nul_path_is_rejected(cwd: Path, bad: str) -> None:
    with pytest.raises(ToolError, match="path"):
        resolve_path(bad, cwd)


def test_display_and_title_paths_never_raise(cwd: Path) -> None:
    assert display_path(cwd / "src" / "a.py", cwd) == os.path.join("src", "a.py")
    assert display_path(cwd, cwd) == "."
    assert display_path("/elsewhere/x", cwd) == "/elsewhere/x"
    assert display_path("", cwd) == ""
    assert title_path("./src//a.py") == os.path.join("src", "a.py")
    assert title_path("/abs/x") == "/abs/x"
