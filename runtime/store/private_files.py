"""Keep the data directory to its owner: the directory ``0700``, every file in it ``0600``.

The store holds whole transcripts (the files the tools read, the commands and their
output), ``serve.json`` the daemon's token and ``serve.log`` what the daemon did, so no
other local user may read any of it. New files are created private (``create_private_file``;
SQLite gives its ``-wal`` and ``-shm`` files the database file's mode), and a directory made
by an older version, or by hand under a permissive umask, is tightened when the agent starts
(``make_private``), with one log line that says what was changed.

Entries are opened with ``O_NOFOLLOW`` and changed through their descriptor, so a symbolic
link planted in the directory never makes the agent change the mode of its target; files
owned by another user are left alone and named in the log.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "PRIVATE_DIR_MODE",
    "PRIVATE_FILE_MODE",
    "ModeChange",
    "create_private_file",
    "make_private",
]

logger = logging.getLogger(__name__)

PRIVATE_DIR_MODE: Final = 0o700
PRIVATE_FILE_MODE: Final = 0o600

_OPEN_ENTRY: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
"""How an entry is opened to change its mode: never through a link, never blocking on a FIFO."""


@dataclass(frozen=True, slots=True)
class ModeChange:
    """One entry whose permissions were narrowed, or could not be (``left_because``)."""

    path: Path
    before: int
    after: int
    left_because: str | None = None
    """Why the entry keeps ``before``: another user owns it, or the change failed."""

    def describe(self) -> str:
        if self.left_because is not None:
            return f"{self.path.name} ({self.before:04o}, left as it is: {self.left_because})"
        return f"{self.path.name} {self.before:04o} -> {self.after:04o}"


def make_private(data_dir: Path) -> list[ModeChange]:
    """Create ``data_dir`` (``0700``), or narrow it and everything in it to its owner.

    Returns what was changed (empty for a directory that was already private) and logs it
    in one warning: other local users could read those transcripts until now. Never raises:
    a directory that cannot be created or changed (a read-only file system) is the store's
    to report, which still serves what it can read.
    """
    changes: list[ModeChange] = []
    try:
        data_dir.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
        top = os.open(data_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        logger.warning("cannot make the data directory %s private: %s", data_dir, exc)
        return changes
    try:
        _narrow(top, data_dir, PRIVATE_DIR_MODE, changes)
        _narrow_entries(top, data_dir, changes)
    finally:
        os.close(top)
    if changes:
        logger.warning(
            "the data directory %s was readable by other users; narrowed to its owner: %s",
            data_dir,
            ", ".join(change.describe() for change in changes),
        )
    return changes


def create_private_file(path: Path) -> None:
    """Create ``path`` as an empty ``0600`` file if it does not exist yet (its directory
    ``0700`` if that is new too), so that a library that creates it later with its own mode
    (SQLite: ``0644`` under the usual umask) finds it private."""
    path.parent.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, PRIVATE_FILE_MODE)
    except FileExistsError:  # kept as it is: ``make_private`` narrows what is already there
        return
    os.close(fd)


def _narrow_entries(directory_fd: int, directory: Path, changes: list[ModeChange]) -> None:
    """Narrow every entry below an open directory, descending into subdirectories."""
    try:
        names = os.listdir(directory_fd)
    except OSError:  # an unreadable subdirectory: its own mode was narrowed, if it could be
        return
    for name in names:
        path = directory / name
        try:
            fd = os.open(name, _OPEN_ENTRY, dir_fd=directory_fd)
        except OSError:  # a symbolic link, a socket, or gone meanwhile: nothing to narrow
            continue
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                _narrow(fd, path, PRIVATE_DIR_MODE, changes)
                _narrow_entries(fd, path, changes)
            elif stat.S_ISREG(info.st_mode):
                _narrow(fd, path, PRIVATE_FILE_MODE, changes)
        finally:
            os.close(fd)


def _narrow(fd: int, path: Path, mode: int, changes: list[ModeChange]) -> None:
    """Narrow an open entry to ``mode`` at most (group and other permissions taken off)."""
    info = os.fstat(fd)
    before = stat.S_IMODE(info.st_mode)
    if not before & 0o077:
        return
    after = before & mode
    if info.st_uid != os.geteuid():
        changes.append(ModeChange(path, before, after, "owned by another user"))
        return
    try:
        os.fchmod(fd, after)
    except OSError as exc:
        changes.append(ModeChange(path, before, after, exc.strerror or str(exc)))
        return
    changes.append(ModeChange(path, before, after))
