"""The rotating log the log keeper writes: bounded in files and bytes, lines kept whole,
the newest ones in the file of its name, and the bytes lost to a failed write said."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from tests.support.small_disk import small_disk
from toolprep.runtime.daemon.log_keeper import RotatingLog


def _kept(path: Path, backups: int) -> bytes:
    """Everything kept, oldest first."""
    names = [path.with_name(f"{path.name}.{n}") for n in range(backups, 0, -1)]
    return b"".join(name.read_bytes() for name in [*names, path] if name.exists())


def test_the_files_stay_within_the_bound_and_keep_the_newest_lines_whole(
    tmp_path: Path,
) -> None:
    path, bound, backups = tmp_path / "serve.log", 1000, 3
    lines = [f"line {n} {'x' * (n % 90)}\n".encode() for n in range(3000)]
    written = b"".join(lines)
    log = RotatingLog(path, bound, backups)
    chances = random.Random(38)
    at = 0
    while at < len(written):  # in pieces of any size, as a pipe hands them over
        size = chances.randint(1, 300)
        log.write(written[at : at + size])
        at += size
    log.close()

    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["serve.log", "serve.log.1", "serve.log.2", "serve.log.3"]
    assert all(0 < (tmp_path / name).stat().st_size <= bound for name in files)
    kept = _kept(path, backups)
    assert written.endswith(kept)  # the newest bytes, in order, nothing lost in between
    assert kept.startswith(b"line ")  # whole lines: the oldest file starts with one
    assert all((tmp_path / name).read_bytes().endswith(b"\n") for name in files)
    assert path.read_bytes().endswith(lines[-1])


def test_a_line_longer_than_a_file_is_cut_and_an_existing_log_is_appended_to(
    tmp_path: Path,
) -> None:
    path = tmp_path / "serve.log"
    path.write_bytes(b"before\n")
    log = RotatingLog(path, 10, 2)
    log.write(b"0123456789abcdefghij\nend\n")
    log.close()
    assert path.with_name("serve.log.2").read_bytes() == b"0123456789"
    assert path.with_name("serve.log.1").read_bytes() == b"abcdefghij"
    assert path.read_bytes() == b"\nend\n"
    # "before\n" was in the file rotated out first: only two backups are kept.


def test_bounds_that_would_keep_no_log_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--log-max-bytes must be >= 1, got 0"):
        RotatingLog(tmp_path / "serve.log", 0, 1)
    with pytest.raises(ValueError, match="--log-backups must be >= 1, got 0"):
        RotatingLog(tmp_path / "serve.log", 1, 0)


def test_bytes_a_full_disk_cost_are_counted_and_said_once_it_has_room(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", size="1m") as disk:
        path = disk.path / "serve.log"
        log = RotatingLog(path, 1024 * 1024, 1)
        log.write(b"before\n")
        disk.fill()
        lines = b"lost line\n" * 10_000  # past the page "before" is in
        log.write(lines)
        disk.free()
        log.write(b"after\n")
        log.close()
        kept = _kept(path, 1)
    assert kept.startswith(b"before\n")
    note = re.search(rb"toolprep serve: (\d+) bytes of this log lost: (.+)\n", kept)
    assert note is not None, kept[-200:]
    assert note.group(2) == b"No space left on device"
    assert kept.endswith(note.group(0) + b"after\n")
    written = len(kept) - len(b"before\n") - len(note.group(0)) - len(b"after\n")
    assert written + int(note.group(1)) == len(lines)  # every byte written or counted
