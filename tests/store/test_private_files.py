"""``make_private`` and ``create_private_file`` on real directories: what they narrow, and
the planted entries (links, FIFOs) they must neither follow nor block on."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from toolprep.runtime.store import SessionStore
from toolprep.runtime.store.private_files import create_private_file, make_private


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_a_missing_data_dir_is_created_private(tmp_path: Path) -> None:
    data_dir = tmp_path / "a" / "data"
    old = os.umask(0o022)
    try:
        assert make_private(data_dir) == []
    finally:
        os.umask(old)
    assert _mode(data_dir) == 0o700


def test_a_store_created_under_a_permissive_umask_is_private(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        store = SessionStore(tmp_path / "data" / "sessions.db")
        try:
            modes = {path.name: _mode(path) for path in (tmp_path / "data").iterdir()}
        finally:
            store.close()
    finally:
        os.umask(old)
    assert modes["sessions.db"] == 0o600
    assert all(not mode & 0o077 for mode in modes.values()), modes
    assert _mode(tmp_path / "data") == 0o700


def test_an_existing_file_is_left_as_it_is_by_create(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    path.write_bytes(b"kept")
    path.chmod(0o640)
    create_private_file(path)
    assert path.read_bytes() == b"kept"
    assert _mode(path) == 0o640  # make_private narrows it, at start


def test_readable_entries_are_narrowed_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o755)
    data_dir.chmod(0o755)
    (data_dir / "serve.log").write_text("x")
    (data_dir / "serve.log").chmod(0o664)
    (data_dir / "script").write_text("x")
    (data_dir / "script").chmod(0o755)
    (data_dir / "private").write_text("x")
    (data_dir / "private").chmod(0o600)
    with caplog.at_level(logging.WARNING, logger="toolprep.runtime.store.private_files"):
        changes = make_private(data_dir)
    assert sorted(change.describe() for change in changes) == [
        "data 0755 -> 0700",
        "script 0755 -> 0600",
        "serve.log 0664 -> 0600",
    ]
    assert len(caplog.records) == 1
    assert str(data_dir) in caplog.records[0].getMessage()
    assert make_private(data_dir) == []


def test_a_planted_link_is_not_followed_and_a_fifo_does_not_block(tmp_path: Path) -> None:
    outside, target = tmp_path / "outside", tmp_path / "target"
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    outside.mkdir()
    data_dir.chmod(0o755)
    outside.chmod(0o755)
    target.write_text("someone else's")
    target.chmod(0o644)
    (data_dir / "link").symlink_to(target)
    (data_dir / "dir-link").symlink_to(outside)
    os.mkfifo(data_dir / "fifo", 0o666)
    (data_dir / "fifo").chmod(0o666)
    changes = make_private(data_dir)
    assert _mode(target) == 0o644
    assert _mode(outside) == 0o755
    assert _mode(data_dir / "fifo") == 0o666  # not a file the agent writes: left alone
    assert [change.path for change in changes] == [data_dir]
