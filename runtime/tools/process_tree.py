"""A process's descendants, whichever session or group they moved to, and ending them.

A process group reaches what a program started unless it left: a child
that called ``setsid`` (or ``setpgid``) is in a group of its own, and one
that was double-forked (its parent exited) is an orphan that the kernel
hands to the nearest *child subreaper* ancestor, else to init. So a program
whose descendants must all end with it is started as a subreaper
(``subreaper_argv``: a small launcher sets ``PR_SET_CHILD_SUBREAPER`` and
executes the program, which keeps the attribute): while it runs, every
process it started, however detached, is its descendant by parent id, and
``descendants`` finds them by walking ``/proc/*/stat``.

Linux only: elsewhere ``subreaper_argv`` returns the argv unchanged and
``descendants`` finds nothing, leaving the process group as the only reach.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["Tree", "descendants", "end_tree", "executable_or_raise", "subreaper_argv"]

PR_SET_CHILD_SUBREAPER = 36

_LAUNCHER = (
    "import ctypes, os, sys\n"
    "ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # refused (a sandbox): the group still reaches\n"
    "try:\n"
    "    os.execvp(sys.argv[1], sys.argv[1:])\n"
    "except OSError as exc:\n"
    "    sys.exit(f'cannot start {sys.argv[1]!r}: {exc.strerror}')\n"
)
"""Run isolated (``-I``: no ``PYTHON*`` variables, so an ``env`` entry cannot choose what it
imports) and without ``site`` (``-S``): only ``ctypes`` is loaded before the ``exec``."""

Tree = Mapping[int, str]
"""Pid to its start time (clock ticks since boot), so a pid reused later is not mistaken."""

_MAX_ROUNDS = 8
"""How often ``end_tree`` looks again for what the processes it ended started meanwhile."""


def subreaper_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` run as a child subreaper (the same process, after one ``exec``)."""
    if not sys.platform.startswith("linux"):
        return list(argv)
    return [sys.executable, "-I", "-S", "-c", _LAUNCHER, *argv]


def executable_or_raise(command: str, *, cwd: str, env: Mapping[str, str]) -> None:
    """Raise the ``OSError`` starting ``command`` directly would (as ``subprocess`` does),
    since through the launcher a missing program would only show as an exit status."""
    if os.sep in command:
        path = os.path.join(cwd, command)
        if not os.path.isfile(path):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command)
        if not os.access(path, os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), command)
        return
    if shutil.which(command, path=env.get("PATH", os.defpath)) is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command)


def _stat(pid: int) -> tuple[int, str] | None:
    """The parent pid and start time of ``pid``, or None if it is gone (or a zombie)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        fields = text.rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[1]), fields[19]


def _parents() -> dict[int, tuple[int, str]]:
    """Every live process's parent pid and start time, read from ``/proc``."""
    found: dict[int, tuple[int, str]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                stat = _stat(int(entry.name))
                if stat is not None:
                    found[int(entry.name)] = stat
    return found


def descendants(root: int) -> dict[int, str]:
    """Every live descendant of ``root`` (not ``root`` itself), with its start time."""
    return _below([root], _parents())


def _below(roots: Sequence[int], parents: Mapping[int, tuple[int, str]]) -> dict[int, str]:
    children: dict[int, list[int]] = {}
    for pid, (parent, _start) in parents.items():
        children.setdefault(parent, []).append(pid)
    found: dict[int, str] = {}
    stack = [child for root in roots for child in children.get(root, ())]
    while stack:
        pid = stack.pop()
        if pid not in found:
            found[pid] = parents[pid][1]
            stack.extend(children.get(pid, ()))
    return found


def end_tree(tree: Tree) -> None:
    """SIGKILL every process of ``tree`` that still runs, and what they started since.

    A process whose start time no longer matches is another one under a reused pid
    and is left alone.
    """
    pending = dict(tree)
    ended: set[int] = set()
    for _ in range(_MAX_ROUNDS):
        if not pending:
            return
        parents = _parents()
        live = [pid for pid, start in pending.items() if parents.get(pid, (0, ""))[1] == start]
        spawned = _below(live, parents)
        for pid in live:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            ended.add(pid)
        pending = {pid: start for pid, start in spawned.items() if pid not in ended}
