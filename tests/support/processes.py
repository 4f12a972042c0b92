"""Watching the processes a test started indirectly (through the agent's shell tool)."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path


def alive(pid: int) -> bool:
    """True if ``pid`` runs and is not a zombie (containers may never reap orphans)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def gone_within(pid: int, seconds: float) -> bool:
    """Poll until ``pid`` is gone; False if it outlived ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def pid_from(path: Path, seconds: float) -> int:
    """The pid a command wrote to ``path`` (``echo $! > path`` writes the line at once)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if text.endswith("\n"):
            return int(text)
        time.sleep(0.02)
    raise AssertionError(f"{path.name} was never written")


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
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not pids_with_argument(argument):
            return True
        time.sleep(0.05)
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
