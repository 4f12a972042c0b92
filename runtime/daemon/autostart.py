"""``toolprep connect --start``: start ``toolprep serve`` detached when no daemon answers.

The daemon must outlive the editor that happened to start it, and the
``connect`` it started through: a client that ends an agent by killing its
whole process tree (acpx walks the descendants of the agent's pid and its
process group) used to kill the daemon with it, running turns included. So
it belongs to nobody: a short-lived launcher interpreter (``_DETACH``) is
spawned in a session of its own (no terminal, no process group the editor
signals), forks the daemon and exits at once, so the daemon's parent is
init (or the nearest subreaper), never ``connect``. The daemon keeps no
descriptor of ``connect``'s beyond 0 to 2: stdin is ``/dev/null``, stdout
and stderr go to ``serve.log`` in the data directory, everything else is
closed before it runs. ``serve`` itself is told ``--log-file DATA_DIR/serve.log``: from
its first moments on, its output goes to a log keeper that rotates the file by size
(``log_keeper``); the launcher's ``serve.log`` descriptors only catch what comes before
(an interpreter that cannot start, options ``serve`` cannot parse).

It listens on a free port (``--port 0`` unless the options name one) and
publishes the actual one in its ``serve.json``, which ``connect`` reads:
daemons of several data directories never compete for one port.
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

__all__ = ["SERVE_LOG", "StartFailed", "daemon_running", "start_daemon", "starting_alone"]

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


_DETACH: Final = """
import os, sys
log, argv = sys.argv[1], sys.argv[2:]
pid = os.fork()
if pid:
    os.write(1, b"%d\\n" % pid)
    os._exit(0)
try:
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    os.execv(argv[0], argv)
except BaseException as exc:
    os.write(2, ("toolprep connect --start: cannot run %s: %s\\n" % (argv[0], exc)).encode())
    os._exit(127)
"""
"""The launcher, run by ``python -I -S -c`` in a session of its own: fork the daemon (which
redirects its descriptors and runs ``serve``), print its pid, and exit, leaving it to init."""


def start_daemon(
    data_dir: Path,
    serve_options: Sequence[str],
    environ: Mapping[str, str],
    timeout_s: float,
) -> DaemonAddress:
    """Start ``toolprep serve --data-dir DATA_DIR --port 0 --log-file DATA_DIR/serve.log
    SERVE_OPTIONS``, detached; its address once it wrote it (a ``--port`` or ``--log-file``
    among ``SERVE_OPTIONS`` comes later and wins).

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
        "--port",
        "0",
        "--log-file",
        str(log),
        *serve_options,
    ]
    pid = _detached(argv, environ, log)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            address = read_daemon_file(data_dir)
        except DaemonFileError:
            pass
        else:
            if address.pid == pid:
                return address
        if not daemon_running(pid):
            raise StartFailed(
                f"the started toolprep serve (pid {pid}) exited: {_last_line(log)} (its log: {log})"
            )
        if time.monotonic() >= deadline:
            raise StartFailed(
                f"the started toolprep serve (pid {pid}) did not write "
                f"{daemon_file_path(data_dir)} within {timeout_s:g} s (its log: {log})"
            )
        time.sleep(_POLL_S)


def _detached(argv: Sequence[str], environ: Mapping[str, str], log: Path) -> int:
    """Run ``argv`` as a process of nobody's (see the module's docstring); its pid.

    Spawned, not forked here: this process has threads (the signal dumper), and a
    fork of a threaded process may deadlock in the child.
    """
    read_end, write_end = os.pipe()
    try:
        launcher = os.posix_spawn(
            sys.executable,
            [sys.executable, "-I", "-S", "-c", _DETACH, str(log), *argv],
            dict(environ),
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, write_end, 1),
                (os.POSIX_SPAWN_OPEN, 2, str(log), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600),
            ],
            setsid=True,
        )
        os.close(write_end)
        write_end = -1
        with os.fdopen(read_end, "rb") as said:
            read_end = -1
            printed = said.read()
    finally:
        for fd in (read_end, write_end):
            if fd >= 0:
                os.close(fd)
    _, status = os.waitpid(launcher, 0)
    try:
        return int(printed)
    except ValueError:
        code = os.waitstatus_to_exitcode(status)
        raise StartFailed(
            f"the launcher of toolprep serve exited with status {code} before starting it: "
            f"{_last_line(log)} (its log: {log})"
        ) from None


def daemon_running(pid: int) -> bool:
    """Whether ``pid`` still runs: not ours to wait for, and a zombie counts as gone (a
    container's init may never reap it). Not a pid at all (0 or less names a group) is gone."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


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
