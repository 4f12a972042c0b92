"""Kills a process's tool process groups after it dies, however it died.

A process that is killed outright (SIGKILL, ``ray.kill`` of the actor it
hosts) runs nothing to stop the shell commands and MCP servers it started,
and when it ran on another machine no front can signal them either. So such
a process starts this small watcher beside it and tells it on a pipe which
process groups are live (``+PGID`` and ``-PGID`` lines). The pipe's end is
the sign the process is gone: the watcher SIGKILLs every group still listed
and exits. It forks itself off first, so it is no child of the watched
process and whatever kills that process's children does not take it too.

Run as ``python -m toolprep.runtime.tools.group_reaper``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading

from toolprep.runtime.tools.process_groups import signal_group

__all__ = ["GroupReaper"]


class GroupReaper:
    """The watched process's end of the pipe; ``changed`` fits ``ProcessGroups.on_change``."""

    def __init__(self) -> None:
        starter = subprocess.Popen(
            [sys.executable, "-m", "toolprep.runtime.tools.group_reaper"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert starter.stdin is not None
        self._pipe = starter.stdin
        starter.wait()  # it forked the watcher off and left; the watcher holds the pipe
        self._lock = threading.Lock()

    def changed(self, pgid: int, live: bool) -> None:
        line = f"{'+' if live else '-'}{pgid}\n".encode()
        with self._lock, contextlib.suppress(OSError, ValueError):
            self._pipe.write(line)
            self._pipe.flush()

    def stop(self) -> None:
        """End the watch: the watcher kills what is still listed (nothing after a clean stop)."""
        with self._lock, contextlib.suppress(OSError):
            self._pipe.close()


def watch(lines: list[bytes] | None = None) -> set[int]:
    """Follow the +/- lines on stdin (or ``lines``) to their end; the groups still live."""
    live: set[int] = set()
    source = lines if lines is not None else sys.stdin.buffer
    for line in source:
        sign, digits = line[:1], line[1:].strip()
        if not digits.isdigit():
            continue
        if sign == b"+":
            live.add(int(digits))
        elif sign == b"-":
            live.discard(int(digits))
    return live


def main() -> int:
    if os.fork() > 0:
        os._exit(0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for pgid in watch():
        signal_group(pgid, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
