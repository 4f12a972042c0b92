"""A small tmpfs to fill up or turn read-only under a real store, agent or daemon.

Mounting needs root and a kernel that lets this process mount (not every
container does); ``small_disk`` skips the test, saying which, where it cannot.
Permission bits would not do for the read-only case: root ignores them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal, assert_never

import pytest

__all__ = ["SmallDisk", "Unwritable", "small_disk"]

Unwritable = Literal["full", "read_only"]

_FILLER = ".filler"


class SmallDisk:
    """A mounted tmpfs at ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fill(self) -> None:
        """Write a file until the disk is full: every later write that needs space fails."""
        fd = os.open(self.path / _FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            block = b"\0" * 65536
            while True:
                try:
                    os.write(fd, block)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    if len(block) == 1:
                        return
                    block = block[: len(block) // 2]
        finally:
            os.close(fd)

    def free(self) -> None:
        """Remove what ``fill`` wrote."""
        (self.path / _FILLER).unlink()

    def read_only(self) -> None:
        """Remount it read-only (refused while a file on it is open for writing)."""
        _mount("-o", "remount,ro", str(self.path))

    def writable(self) -> None:
        _mount("-o", "remount,rw", str(self.path))

    def refuse_writes(self, how: Unwritable) -> Callable[[], None]:
        """Fill it or make it read-only; returns what undoes that."""
        match how:
            case "full":
                self.fill()
                return self.free
            case "read_only":
                self.read_only()
                return self.writable
            case _:
                assert_never(how)


def _mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise OSError(f"mount {' '.join(args)} failed: {done.stderr.strip()}")


@contextlib.contextmanager
def small_disk(path: Path, size: str = "4m") -> Iterator[SmallDisk]:
    """A tmpfs of ``size`` mounted at ``path`` (created), unmounted after; skips the test
    if this process cannot mount one."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root; this test runs as a user")
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (no CAP_SYS_ADMIN?): {done.stderr.strip()}")
    try:
        yield SmallDisk(path)
    finally:
        subprocess.run(["umount", "--lazy", str(path)], capture_output=True, check=False)
