"""Walking the session tree by descriptor, shared by list_directory, glob and search.

A walk that lists a directory and then descends into ``dir/sub`` by name can
be sent anywhere: swap ``sub`` for a symlink between the two steps and the
kernel follows it out of the session directory. So the walk never hands the
kernel a path. Its base is opened by ``confined_fs``'s descriptor walk;
each directory is listed with ``os.scandir(fd)`` and entered with
``open_subdirectory`` (``O_DIRECTORY | O_NOFOLLOW`` relative to its
parent's descriptor), so whatever is swapped in meanwhile is refused
instead of followed; files are opened the same way (``open_child``). What
the walk sees is what the directories it opened hold, always below the base.

Symlinks in the tree are reported but never descended into (no loops, no
escape); where one leads is asked of ``confined_fs.stat_inside``, which
resolves it without the kernel following it, and a link leading outside
cwd is dropped. Version-control internals are skipped. The work budget
(and so cancellation) is checked before each entry, so a walk over a huge
tree stops early with partial results instead of running on. Order is
deterministic (sorted by name, depth first) so results are stable.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Literal

from toolprep.runtime.tools.base import ToolError
from toolprep.runtime.tools.budget import WorkBudget
from toolprep.runtime.tools.confined_fs import (
    open_child,
    open_directory,
    open_file_or_directory,
    open_for_reading,
    open_subdirectory,
    stat_inside,
)
from toolprep.runtime.tools.hidden_paths import HiddenPaths
from toolprep.runtime.tools.paths import relative_parts, resolve_path

__all__ = [
    "SKIP_DIRS",
    "Base",
    "Entry",
    "EntryKind",
    "kind_of",
    "open_base",
    "open_dir_below",
    "open_entry",
    "walk",
]

SKIP_DIRS = frozenset({".git", ".hg", ".svn"})

EntryKind = Literal["dir", "file", "other"]
"""What an entry is; for a symlink, what it leads to."""


@dataclass(frozen=True, slots=True)
class Base:
    """An open directory (or, for search, file) to start from.

    ``rel`` is its path below the session root, ``/``-separated, ``""`` for
    the root itself: results are named by it, and symlinks found below are
    resolved from the root through it.
    """

    fd: int
    rel: str
    kind: EntryKind

    def below(self, rel: str) -> str:
        """``rel`` (relative to this base) as a path relative to the session root."""
        return f"{self.rel}/{rel}" if self.rel and rel else self.rel or rel


@dataclass(frozen=True, slots=True)
class Entry:
    """One walked entry; ``rel`` is relative to the walk's base, with ``/`` separators.

    ``dir_fd`` is the directory holding it, open only until the walk moves
    on: open the entry through it (``open_entry``) before asking for the next.
    """

    name: str
    rel: str
    kind: EntryKind
    is_symlink: bool
    dir_fd: int


def kind_of(mode: int) -> EntryKind:
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "other"


def _base_rel(raw: str, cwd: Path) -> str:
    return "/".join(relative_parts(raw, cwd))


@contextmanager
def open_base(raw: str, cwd: Path, tool: str, *, files_too: bool = False) -> Iterator[Base]:
    """Open ``raw`` (confined to cwd) to walk from, closing it afterwards.

    Raises ToolError naming the tool when it does not exist, leads outside
    cwd, or is not a directory (unless ``files_too``: search also takes a
    file, opened for reading).
    """
    resolve_path(raw, cwd)  # the early refusal, with its precise wording
    try:
        fd = open_file_or_directory(raw, cwd) if files_too else open_directory(raw, cwd)
    except FileNotFoundError:
        raise ToolError(f"{tool}: {raw!r} does not exist") from None
    except NotADirectoryError:
        raise ToolError(f"{tool}: {raw!r} is not a directory") from None
    except OSError as exc:
        raise ToolError(f"{tool}: cannot open {raw!r}: {exc.strerror}") from None
    try:
        kind = kind_of(os.fstat(fd).st_mode) if files_too else "dir"
        yield Base(fd, _base_rel(raw, cwd), kind)
    finally:
        os.close(fd)


@contextmanager
def open_dir_below(raw: str, cwd: Path) -> Iterator[Base | None]:
    """Open directory ``raw`` as a Base, or None if it is missing or not a directory.

    ToolError still stops a path leading outside cwd.
    """
    resolve_path(raw, cwd)
    try:
        fd = open_directory(raw, cwd)
    except OSError:
        yield None
        return
    try:
        yield Base(fd, _base_rel(raw, cwd), "dir")
    finally:
        os.close(fd)


def open_entry(base: Base, entry: Entry, cwd: Path) -> int:
    """A read-only descriptor of a walked file; OSError or ToolError if it cannot be opened.

    A plain entry is opened through its directory's descriptor, refusing a
    symlink swapped in since it was listed; a symlink is resolved from the
    session root by the confined walk, so it too can only reach a file
    inside cwd. Check the type with ``os.fstat`` before reading.
    """
    if entry.is_symlink:
        return open_for_reading(base.below(entry.rel), cwd)
    return open_child(entry.dir_fd, entry.name)


@dataclass(slots=True)
class _Dir:
    """One directory on the walk's stack; ``owned`` descriptors are the walk's to close."""

    fd: int
    owned: bool
    prefix: str
    depth: int
    entries: Iterator[tuple[str, bool, EntryKind]] = field(default_factory=lambda: iter(()))


def _sorted_entries(fd: int, limit: int | None) -> list[tuple[str, bool, EntryKind]]:
    """(name, is_symlink, kind) for the first ``limit`` entries scandir returns, sorted.

    The types come from the directory itself (``d_type``) or an ``lstat``
    relative to ``fd``; nothing is followed. The limit keeps one enormous
    directory from being read and sorted in full (sorting holds the
    interpreter lock) when the budget could never reach most of it anyway.
    """
    found: list[tuple[str, bool, EntryKind]] = []
    try:
        with os.scandir(fd) as scan:
            for entry in islice(scan, limit):
                try:
                    found.append((entry.name, entry.is_symlink(), _plain_kind(entry)))
                except OSError:
                    continue
    except OSError:
        return []
    found.sort()
    return found


def _plain_kind(entry: os.DirEntry[str]) -> EntryKind:
    """The entry's own type, a symlink not followed (its kind is asked for separately)."""
    if entry.is_dir(follow_symlinks=False):
        return "dir"
    if entry.is_file(follow_symlinks=False):
        return "file"
    return "other"


def _link_kind(base: Base, rel: str, cwd: Path) -> EntryKind | None:
    """What the symlink at ``rel`` leads to; None if it leads outside cwd (or loops)."""
    try:
        return kind_of(stat_inside(base.below(rel), cwd).st_mode)
    except ToolError:
        return None  # outside, or a symlink loop: nothing to show
    except OSError:
        return "other"  # dangling or unreadable, but inside


def walk(
    base: Base,
    cwd: Path,
    *,
    max_depth: int | None = None,
    cancelled: threading.Event | None = None,
    budget: WorkBudget | None = None,
    hidden: HiddenPaths | None = None,
) -> Generator[Entry, None, None]:
    """Yield everything below ``base`` (not base itself), depth first, sorted.

    ``max_depth`` 1 means only base's direct children. Raises ToolError when
    ``cancelled`` (or the budget's cancel event) is set mid-walk; ends early,
    with ``budget.stopped`` set, when the budget runs out. ``base.fd`` stays
    the caller's; the descriptors the walk opens are closed when it ends or
    is closed. Entries inside ``hidden`` are passed over.
    """
    limit = None if budget is None else budget.max_entries + 1
    root = os.path.realpath(cwd) if hidden is not None and hidden.roots else None
    stack = [_Dir(base.fd, False, "", 1, iter(_sorted_entries(base.fd, limit)))]
    try:
        while stack:
            top = stack[-1]
            item = next(top.entries, None)
            if item is None:
                stack.pop()
                if top.owned:
                    os.close(top.fd)
                continue
            if cancelled is not None and cancelled.is_set():
                raise ToolError("cancelled")
            name, is_link, own_kind = item
            if name in SKIP_DIRS:
                continue
            if budget is not None and not budget.visit():
                return
            rel = top.prefix + name
            if (
                root is not None
                and hidden is not None
                and hidden.covering(os.path.join(root, base.below(rel)))
            ):
                continue
            kind = _link_kind(base, rel, cwd) if is_link else own_kind
            if kind is None:
                continue
            yield Entry(name, rel, kind, is_link, top.fd)
            if own_kind == "dir" and (max_depth is None or top.depth < max_depth):
                try:
                    fd = open_subdirectory(top.fd, name)
                except OSError:
                    continue  # gone, unreadable, or swapped for a symlink since listed
                stack.append(_Dir(fd, True, rel + "/", top.depth + 1))
                stack[-1].entries = iter(_sorted_entries(fd, limit))
    finally:
        for directory in stack:
            if directory.owned:
                os.close(directory.fd)
