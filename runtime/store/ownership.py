"""Which process serves a stored session, and whether that process still runs.

Several toolprep processes may share one data directory (two editor windows,
the workers of one agent). A session is owned by the process serving it,
named by host, pid and the pid's start time (so a reused pid is not taken
for the owner). Only the cards of sessions whose owner is gone may be
discarded as interrupted, and a session served by a live process cannot be
opened by another.
"""

from __future__ import annotations

import os
import socket
from functools import cache

__all__ = ["describe_owner", "owner_alive", "this_process"]


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), or None if unknown."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


@cache
def this_process() -> str:
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_time(pid) or '?'}"


def describe_owner(owner: str) -> str:
    """``pid 1234 on HOST``: the owner as a person looks for it."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    return f"pid {pid_text} on {host}" if pid_text.isdigit() else owner


def owner_alive(owner: str | None) -> bool:
    """False only when the owner is known to be gone; another host's owner counts as alive."""
    if owner is None:
        return False
    host, _, rest = owner.partition(":")
    pid_text, _, started = rest.partition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return True  # cannot be checked from here: leave its sessions alone
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    now_started = _start_time(pid)
    return started == "?" or now_started is None or now_started == started
