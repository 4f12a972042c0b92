"""Watching the processes a test started indirectly (through the agent's shell tool)."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from tests.support.eventually import eventually


def alive(pid: int) -> bool:
    """True if ``pid`` runs and is not a zombie (containers may never reap orphans)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def gone_within(pid: int, seconds: float) -> bool:
    """Poll until ``pid`` is gone; False if it outlived ``seconds``."""
    try:
        return eventually(lambda: not alive(pid), timeout=seconds)
    except AssertionError:
        return False


def pid_from(path: Path, seconds: float) -> int:
    """The pid a command wrote to ``path`` (``echo $! > path`` writes the line at once)."""

    def written() -> str:
        text = path.read_text() if path.exists() else ""
        return text if text.endswith("\n") else ""

    return int(eventually(written, timeout=seconds, what=f"{path.name} was never written"))


def pids_with_argument(argument: str) -> list[int]:
    """Live processes (no zombies) whose command line has ``argument`` as one of its words.

    Read from the process table, so it finds processes the test never saw a pid of
    (an MCP server the agent or one of its workers started).
    """
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argument.encode() in words and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def none_with_argument_within(argument: str, seconds: float) -> bool:
    """Poll until no process has ``argument`` on its command line; False if some outlived it."""
    try:
        return eventually(lambda: not pids_with_argument(argument), timeout=seconds)
    except AssertionError:
        return False


def worker_pids_of(pid: int) -> list[int]:
    """The worker processes among ``pid``'s children (a thread or child may end meanwhile)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            for child in (task / "children").read_text().split():
                words = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
                if b"toolprep.runtime.workers.worker" in words:
                    found.append(int(child))
    return found


def parent_of(pid: int) -> int | None:
    """``pid``'s parent, from the process table; None once it is gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None


def ancestors(pid: int) -> list[int]:
    """``pid``'s parent, its parent's parent, and so on up to init."""
    found: list[int] = []
    parent = parent_of(pid)
    while parent is not None and parent > 0:
        found.append(parent)
        parent = parent_of(parent)
    return found


def descendants(pid: int) -> list[int]:
    """Every live process whose ancestors include ``pid``, read from ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            parent = parent_of(int(entry.name))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry.name))
    found: list[int] = []
    waiting = [pid]
    while waiting:
        for child in children.get(waiting.pop(), []):
            found.append(child)
            waiting.append(child)
    return found


def kill_process_tree(pid: int) -> list[int]:
    """End ``pid`` the way clients that reap an agent's process tree do (acpx): SIGTERM to
    it, every descendant and its process group, then SIGKILL to all of them; the pids hit."""
    tree = [pid, *descendants(pid)]
    group = os.getpgid(pid)
    assert group != os.getpgrp(), "the process shares the test's process group"
    for sent in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, sent)
        for member in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(member, sent)
    return tree
