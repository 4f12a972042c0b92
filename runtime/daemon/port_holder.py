"""Who listens on a TCP port: for the one line ``serve`` prints when its ``--port`` is taken.

"Address already in use" alone leaves the user to find the other process.
On Linux the kernel's socket tables (``/proc/net/tcp``, ``tcp6``) give the
listening sockets' inodes, and a process's ``/proc/PID/fd`` links name the
sockets it holds; only this user's processes can be read, so a holder of
another user's (or one that just left) comes back as None.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import Final

__all__ = ["port_holder", "port_in_use_message"]

_LISTEN: Final = "0A"  # TCP_LISTEN in the kernel's hex state column
_COMMAND_CHARS: Final = 200


def port_holder(port: int, proc: Path = Path("/proc")) -> str | None:
    """``pid N (COMMAND LINE)`` of a process listening on ``port``, else None."""
    inodes = _listening_inodes(port, proc)
    if not inodes:
        return None
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (entry / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in inodes:
                        return f"pid {entry.name} ({_command_line(entry)})"
    return None


def _listening_inodes(port: int, proc: Path) -> set[str]:
    """The ``socket:[INODE]`` names of the sockets listening on ``port``."""
    found: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            local_port = fields[1].rsplit(":", 1)[-1]
            if int(local_port, 16) == port:
                found.add(f"socket:[{fields[9]}]")
    return found


def _command_line(entry: Path) -> str:
    try:
        words = (entry / "cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    except OSError:
        return "command line unreadable"
    text = " ".join(word.decode(errors="replace") for word in words)
    return text if len(text) <= _COMMAND_CHARS else text[: _COMMAND_CHARS - 3] + "..."


def port_in_use_message(host: str, port: int, error: OSError) -> str | None:
    """The line for a bind that failed because ``port`` is taken; None for any other error."""
    if error.errno != errno.EADDRINUSE or port == 0:
        return None
    holder = port_holder(port)
    held = (
        f"held by {holder}"
        if holder is not None
        else "held by a process this user cannot see, or one that just left"
    )
    return (
        f"port {port} on {host} is already in use ({held}): pass --port N for another port, "
        "or --port 0 for any free one (a daemon started by `toolprep connect --start` does "
        "that), or stop the process that holds it"
    )
