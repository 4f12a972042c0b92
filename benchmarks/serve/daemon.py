"""The daemon under load: ``toolprep serve`` started for a run, and its process tree's
CPU, RSS and threads."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from benchmarks import _harness as h
from toolprep.testing.daemon import serve_command

__all__ = ["START_TIMEOUT_S", "STOP_TIMEOUT_S", "Daemon", "Side", "daemon_command", "serve_daemon"]

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0
_LISTENING = re.compile(r"serving ACP on (ws://\S+)")


@dataclass
class Daemon:
    """``toolprep serve`` in its own process; meters read ``/proc`` for it and its workers."""

    process: subprocess.Popen[bytes]
    url: str
    token: str
    stderr_path: Path

    def processes(self) -> list[int]:
        return h.process_tree(self.process.pid)

    def cpu_seconds(self) -> float:
        return sum(_cpu_or_zero(pid) for pid in self.processes())

    def threads(self) -> int:
        return sum(_status_or_zero(h.os_threads, pid) for pid in self.processes())

    def rss_kib(self) -> int:
        return sum(_status_or_zero(h.rss_kib, pid) for pid in self.processes())

    def rss_split_kib(self) -> dict[str, int]:
        """RSS of the front (the process that holds the connections) and of its workers."""
        front = _status_or_zero(h.rss_kib, self.process.pid)
        return {"front": front, "workers": self.rss_kib() - front}

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")


def _cpu_or_zero(pid: int) -> float:
    try:
        return h.process_cpu_seconds(pid)
    except OSError:
        return 0.0  # ended between listing and reading


def _status_or_zero(read: Callable[[int], int], pid: int) -> int:
    try:
        return read(pid)
    except (OSError, KeyError):
        return 0


def daemon_command(
    provider: str,
    base_url: str,
    workers: int | None,
    data_dir: Path | None,
    side: Side | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """``toolprep serve`` on a free loopback port, pointed at the loopback provider, with
    ``extra_args`` after the rest."""
    side = side or Side()
    command = serve_command(provider, base_url, "--model", "bench", python=side.python)
    if side.event_loop is not None:
        command += ["--event-loop", side.event_loop]
    if workers is not None:
        command += ["--workers", str(workers)]
    command += ["--data-dir", str(data_dir)] if data_dir is not None else ["--no-persist"]
    return command + list(extra_args)


@dataclass(frozen=True)
class Side:
    """Which daemon a ``serve`` run starts: its interpreter, and its ``--event-loop`` if given."""

    python: str = sys.executable
    event_loop: str | None = None


@contextmanager
def serve_daemon(
    provider: str,
    base_url: str,
    workers: int | None,
    data_dir: Path | None,
    scratch: Path,
    side: Side | None = None,
    extra_args: Sequence[str] = (),
) -> Iterator[Daemon]:
    """Start the daemon, yield it once it listens, always stop it (SIGTERM, then kill).

    Its stderr goes to a file (polled for the listening line) so no pipe is
    ever left undrained, however much it logs.
    """
    stderr_path = scratch / f"serve-{uuid.uuid4().hex[:8]}.stderr"
    token = secrets.token_urlsafe(32)
    env = {
        **os.environ,
        h.API_KEY_VARIABLES[provider]: "bench",
        "TOOLPREP_TOKEN": token,
        "XDG_DATA_HOME": str(scratch / "data-home"),  # its daemon file, with --no-persist
    }
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            daemon_command(provider, base_url, workers, data_dir, side, extra_args),
            cwd=h.REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        url: str | None = None
        while url is None:
            found = _LISTENING.search(stderr_path.read_text(encoding="utf-8", errors="replace"))
            if found:
                url = found.group(1)
            elif process.poll() is not None:
                raise RuntimeError(
                    f"toolprep serve exited {process.returncode}: {_tail(stderr_path)}"
                )
            elif time.monotonic() > deadline:
                raise RuntimeError(f"toolprep serve did not listen: {_tail(stderr_path)}")
            else:
                time.sleep(0.05)
        yield Daemon(process, url, token, stderr_path)
    finally:
        h.stop_daemon(process, STOP_TIMEOUT_S)


def _tail(path: Path, lines: int = 20) -> str:
    return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
