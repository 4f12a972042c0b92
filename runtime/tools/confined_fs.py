"""Opening files below the session directory so that no symlink game can escape it.

Checking a path and then opening it by name leaves a window in which a
directory on the way can be swapped for a symlink to somewhere else. So the
file tools, and the tree walks of list_directory, glob and search (which
start from ``open_directory`` and go on with ``open_subdirectory`` and
``open_child``), never open a model-chosen path by name: they walk it from a
descriptor of the session root, one component at a time, each opened with
``O_NOFOLLOW`` relative to its parent's descriptor. Whatever the disk looks
like at any instant, every step stays below the directory it started from.

Symlinks that point inside the session directory are still honoured, because
projects use them (``docs -> ../shared/docs``); the walk resolves them itself:
it reads the link, splices its target into the components still to walk and
continues from the link's own directory (or from the root, for an absolute
target inside it). ``..`` pops the walked directory stack instead of asking
the kernel, so it can never climb above the root. A link that leads out of
the root, or more than ``MAX_LINK_HOPS`` links in one path, is refused.

What the walk does not defend against: a directory renamed out of the session
directory while it is being walked (the descriptor then follows the move).
Only symlinks are treated as hostile, as the session cwd is the user's own.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Final, Literal, TypeVar, assert_never

from toolprep.runtime.tools.base import ToolError
from toolprep.runtime.tools.paths import is_within, relative_parts, session_root

__all__ = [
    "MAX_LINK_HOPS",
    "LinkLeadsOutside",
    "OpenedFile",
    "make_directories",
    "open_child",
    "open_directory",
    "open_file_or_directory",
    "open_for_reading",
    "open_for_writing",
    "open_subdirectory",
    "regular_file",
    "stat_inside",
]

MAX_LINK_HOPS: Final = 40
"""Links followed in one path, as Linux's own limit; also what stops link loops."""

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO must fail or return at once, not wait for a writer.
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_UPDATE_FLAGS: Final = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE_FLAGS: Final = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE_RACE_RETRIES: Final = 8

FinalOpen = Literal["read", "write"]
_T = TypeVar("_T")


class LinkLeadsOutside(ToolError):
    """A symlink on the path leads out of the session directory (or above its root)."""


@dataclass(frozen=True, slots=True)
class OpenedFile:
    """A descriptor of the opened file; ``created`` when this call made it."""

    fd: int
    created: bool


@dataclass(slots=True)
class _Walk:
    """The directories walked so far, as descriptors; ``stack[0]`` is the session root.

    ``..`` pops this stack, so the walk's idea of "parent" is the directory it
    actually came through, never whatever the kernel's ``..`` is now.
    """

    raw: str
    root: Path
    real_root: str
    stack: list[int] = field(default_factory=list)
    hops: int = 0

    @property
    def here(self) -> int:
        return self.stack[-1]

    def up(self) -> None:
        if len(self.stack) == 1:
            raise LinkLeadsOutside(
                f"path {self.raw!r} resolves through a symlink to above the session "
                f"directory {self.root}"
            )
        os.close(self.stack.pop())

    def back_to_root(self) -> None:
        while len(self.stack) > 1:
            os.close(self.stack.pop())

    def close(self) -> None:
        for fd in reversed(self.stack):
            os.close(fd)
        self.stack.clear()

    def follow(self, name: str, pending: list[str]) -> bool:
        """If ``name`` (in the current directory) is a symlink, splice its target into ``pending``.

        Returns False when it is not a symlink, so the caller reports its own error.
        """
        try:
            target = os.readlink(name, dir_fd=self.here)
        except OSError as exc:
            if exc.errno in (errno.EINVAL, errno.ENOENT):
                return False
            raise
        self.hops += 1
        if self.hops > MAX_LINK_HOPS:
            raise ToolError(
                f"path {self.raw!r} goes through more than {MAX_LINK_HOPS} symlinks "
                "(a symlink loop?)"
            )
        if os.path.isabs(target):
            normal = os.path.normpath(target)
            if is_within(normal, str(self.root)):
                inside = os.path.relpath(normal, self.root)
            elif is_within(normal, self.real_root):
                inside = os.path.relpath(normal, self.real_root)
            else:
                raise LinkLeadsOutside(
                    f"path {self.raw!r} resolves through a symlink to {target}, outside the "
                    f"session directory {self.root}"
                )
            self.back_to_root()
            parts = inside.split(os.sep)
        else:
            parts = target.split("/")
        pending[:0] = parts
        return True


def _walk_to(
    path: str,
    cwd: Path | str,
    last: Callable[[_Walk, str, list[str]], _T | None] | None,
    at_directory: Callable[[_Walk], _T],
    *,
    make_parents: bool,
) -> _T:
    """Walk ``path`` from the session root and finish with ``last`` or ``at_directory``.

    ``last`` handles the final component (None when that was a symlink whose
    target is now pending); without it every component is entered as a
    directory. ``at_directory`` makes the result when the walk ends on a
    directory (``.``, ``a/..``, or every component entered).
    """
    parts = relative_parts(path, cwd)
    root = session_root(cwd)
    walk = _Walk(raw=path, root=root, real_root=os.path.realpath(root))
    walk.stack.append(os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
    try:
        pending = list(parts)
        while pending:
            name = pending.pop(0)
            if name in ("", "."):
                continue
            if name == "..":
                walk.up()
                continue
            if not pending and last is not None:
                result = last(walk, name, pending)
                if result is None:
                    continue  # it was a symlink: its target is now pending
                return result
            _enter_directory(walk, name, pending, make_parents=make_parents)
        return at_directory(walk)
    finally:
        walk.close()


def _refuse_directory(walk: _Walk) -> OpenedFile:
    raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), walk.raw)


def _dup_directory(walk: _Walk) -> int:
    return os.dup(walk.here)


def _opened_directory(walk: _Walk) -> OpenedFile:
    return OpenedFile(os.dup(walk.here), created=False)


def _stat_directory(walk: _Walk) -> os.stat_result:
    return os.fstat(walk.here)


def _enter_directory(walk: _Walk, name: str, pending: list[str], *, make_parents: bool) -> None:
    """Push ``name`` onto the walk, following it if it is an inside symlink."""
    for _ in range(_CREATE_RACE_RETRIES):
        try:
            walk.stack.append(os.open(name, _DIR_FLAGS, dir_fd=walk.here))
            return
        except FileNotFoundError:
            if not make_parents:
                raise
            # Someone may make it (or a symlink) meanwhile: then open it again, no-follow.
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, dir_fd=walk.here)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            if walk.follow(name, pending):
                return
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), name) from None
    raise FileNotFoundError(errno.ENOENT, "kept disappearing while being created", name)


def _open_final(walk: _Walk, name: str, final: FinalOpen, pending: list[str]) -> OpenedFile | None:
    """Open the last component; None if it was a symlink whose target is now pending."""
    for _ in range(_CREATE_RACE_RETRIES):
        try:
            match final:
                case "read":
                    return OpenedFile(os.open(name, _READ_FLAGS, dir_fd=walk.here), created=False)
                case "write":
                    return _create_or_update(walk.here, name)
                case _:
                    assert_never(final)
        except FileNotFoundError:
            if final == "read":
                raise
            # Removed between the exclusive create and the update open: try again.
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            if walk.follow(name, pending):
                return None
            raise
    raise FileNotFoundError(errno.ENOENT, "kept disappearing while being written", name)


def _stat_final(walk: _Walk, name: str, pending: list[str]) -> os.stat_result | None:
    """``lstat`` the last component; None if it was a symlink whose target is now pending."""
    for _ in range(_CREATE_RACE_RETRIES):
        info = os.stat(name, dir_fd=walk.here, follow_symlinks=False)
        if not stat.S_ISLNK(info.st_mode):
            return info
        if walk.follow(name, pending):
            return None
        # Replaced by a non-link between the stat and the readlink: look again.
    raise FileNotFoundError(errno.ENOENT, "kept changing while being looked at", name)


def _reader(walk: _Walk, name: str, pending: list[str]) -> OpenedFile | None:
    return _open_final(walk, name, "read", pending)


def _writer(walk: _Walk, name: str, pending: list[str]) -> OpenedFile | None:
    return _open_final(walk, name, "write", pending)


def _create_or_update(dir_fd: int, name: str) -> OpenedFile:
    """Create ``name`` exclusively, or open the existing one; neither follows a symlink.

    ``O_CREAT | O_EXCL`` fails on any existing name, symlinks included, so a
    file is never created through a link; the update open then reports the
    link as ``ELOOP`` for the walk to resolve.
    """
    try:
        return OpenedFile(os.open(name, _CREATE_FLAGS, 0o666, dir_fd=dir_fd), created=True)
    except FileExistsError:
        return OpenedFile(os.open(name, _UPDATE_FLAGS, dir_fd=dir_fd), created=False)


def open_for_reading(path: str, cwd: Path | str) -> int:
    """A read-only descriptor of ``path``, which really lies inside cwd.

    Raises ToolError for a path or symlink leading outside, OSError
    (FileNotFoundError, NotADirectoryError, ...) for the ordinary failures.
    The file may be a directory or a FIFO: check ``os.fstat`` before reading.
    """
    return _walk_to(path, cwd, _reader, _refuse_directory, make_parents=False).fd


def open_file_or_directory(path: str, cwd: Path | str) -> int:
    """Like ``open_for_reading``, but a path ending at a directory (``.``, ``a/..``) is opened too.

    For search, which takes either; ``os.fstat`` tells which it got.
    """
    return _walk_to(path, cwd, _reader, _opened_directory, make_parents=False).fd


def open_for_writing(path: str, cwd: Path | str) -> OpenedFile:
    """A read-write descriptor of ``path`` inside cwd, creating it and its parent folders.

    The file is neither truncated nor checked to be regular: the caller reads
    the old content for its diff first, and ``os.fstat``s the descriptor.
    """
    return _walk_to(path, cwd, _writer, _refuse_directory, make_parents=True)


def make_directories(path: str, cwd: Path | str) -> None:
    """Create directory ``path`` (and its parents) inside cwd, like ``mkdir -p``."""
    os.close(_walk_to(path, cwd, None, _dup_directory, make_parents=True))


def open_directory(path: str, cwd: Path | str) -> int:
    """A descriptor of directory ``path``, which really lies inside cwd.

    Opened without following a symlink it has not checked, like the files;
    list it with ``os.scandir(fd)`` and open what is in it with ``dir_fd``.
    Raises ToolError for a path or symlink leading outside, OSError
    (FileNotFoundError, NotADirectoryError, ...) for the ordinary failures.
    """
    return _walk_to(path, cwd, None, _dup_directory, make_parents=False)


def stat_inside(path: str, cwd: Path | str) -> os.stat_result:
    """What ``path`` leads to, symlinks resolved by the confined walk, never by the kernel.

    For a symlink found while walking a tree: whether it leads to a directory
    or a file inside cwd. Raises LinkLeadsOutside if it leads out, ToolError
    for a symlink loop, OSError (FileNotFoundError for a dangling link, ...)
    for the ordinary failures. Nothing is opened but the directories on the way.
    """
    return _walk_to(path, cwd, _stat_final, _stat_directory, make_parents=False)


def open_subdirectory(dir_fd: int, name: str) -> int:
    """A descriptor of subdirectory ``name`` of directory ``dir_fd``; never follows a symlink.

    A symlink (or anything else swapped in for the directory) raises OSError.
    """
    return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


def open_child(dir_fd: int, name: str) -> int:
    """A read-only descriptor of entry ``name`` of directory ``dir_fd``; never follows a symlink.

    A symlink raises OSError (``ELOOP``); check the type with ``os.fstat``.
    """
    return os.open(name, _READ_FLAGS, dir_fd=dir_fd)


def regular_file(fd: int, raw: str, tool: str, mode: Literal["rb", "r+b"]) -> BinaryIO:
    """``fd`` as a file object, or ToolError (and ``fd`` closed) if it is not a regular file.

    The type is checked on the descriptor, not the name, so it is the file
    that was opened that gets checked.
    """
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ToolError(f"{tool}: {raw!r} is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise ToolError(f"{tool}: {raw!r} is not a regular file")
        return os.fdopen(fd, mode)
    except BaseException:
        os.close(fd)
        raise
