"""``toolprep connect --start``: start ``toolprep serve`` detached when no daemon answers.

The daemon must outlive the editor that happened to start it, so it runs in
a session of its own (no terminal, no process group the editor signals),
with stdin on ``/dev/null`` and its output appended to ``serve.log`` in the
data directory, the one whose ``serve.json`` then names it. It is spawned
with ``posix_spawn`` rather than ``subprocess.Popen``: it is never waited
for once it is up, which a ``Popen`` object would complain about.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final

from toolprep.runtime.daemon.discovery import (
    DaemonAddress,
    DaemonFileError,
    daemon_file_path,
    read_daemon_file,
)

__all__ = ["SERVE_LOG", "StartFailed", "start_daemon", "starting_alone"]

SERVE_LOG: Final = "serve.log"
_START_LOCK: Final = ".serve.start.lock"
_POLL_S: Final = 0.05
_LOG_TAIL_BYTES: Final = 4096


class StartFailed(RuntimeError):
    """The started daemon exited, or did not announce itself in time."""


@contextlib.contextmanager
def starting_alone(data_dir: Path) -> Iterator[None]:
    """Hold the data directory's start lock: one ``--start`` at a time looks and starts.

    An editor opening two agent threads at once runs two ``connect --start``;
    the second must find the daemon the first started, not start another
    whose ``serve.json`` would hide the first one's sessions.
    """
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(data_dir / _START_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def start_daemon(
    data_dir: Path,
    serve_options: Sequence[str],
    environ: Mapping[str, str],
    timeout_s: float,
) -> DaemonAddress:
    """Start ``toolprep serve --data-dir DATA_DIR SERVE_OPTIONS``; its address once it wrote it.

    The daemon file counts only once it names the started process: an old
    one left by a killed daemon names another pid.
    """
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    log = data_dir / SERVE_LOG
    argv = [
        sys.executable,
        "-m",
        "toolprep.runtime.cli",
        "serve",
        "--data-dir",
        str(data_dir),
        *serve_options,
    ]
    pid = os.posix_spawn(
        sys.executable,
        argv,
        dict(environ),
        file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, str(log), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600),
            (os.POSIX_SPAWN_DUP2, 1, 2),
        ],
        setsid=True,
    )
    deadline = time.monotonic() + timeout_s
    while True:
        exited, status = os.waitpid(pid, os.WNOHANG)
        if exited:
            code = os.waitstatus_to_exitcode(status)
            raise StartFailed(
                f"the started toolprep serve exited with status {code}: {_last_line(log)} "
                f"(its log: {log})"
            )
        try:
            address = read_daemon_file(data_dir)
        except DaemonFileError:
            pass
        else:
            if address.pid == pid:
                return address
        if time.monotonic() >= deadline:
            raise StartFailed(
                f"the started toolprep serve (pid {pid}) did not write "
                f"{daemon_file_path(data_dir)} within {timeout_s:g} s (its log: {log})"
            )
        time.sleep(_POLL_S)


def _last_line(log: Path) -> str:
    """The log's last non-blank line, where serve says why it refused to start."""
    try:
        with log.open("rb") as text:
            size = text.seek(0, os.SEEK_END)
            text.seek(max(0, size - _LOG_TAIL_BYTES))
            tail = text.read().decode(errors="replace")
    except OSError:
        return "(its log is unreadable)"
    lines = [line for line in tail.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(it wrote nothing)"
