"""Watching the processes a test started indirectly (through the agent's shell tool)."""

from __future__ import annotations

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
