"""The load generator (``benchmarks.support.load_server``) in its own process, and its counters.

Its own process so that its CPU is not counted as the runtime's; it prints its port as
its first line and answers ``GET /stats``.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import orjson

__all__ = [
    "BENCH_FILE",
    "LOOPBACK",
    "LoopbackServer",
    "loopback_server",
    "port_reporting_process",
    "server_stats",
]

LOOPBACK = "127.0.0.1"
REPO = Path(__file__).resolve().parents[2]

BENCH_FILE = "bench.txt"
"""The file the load generator's ``read_file`` calls read, relative to the session's
working directory. Here, not in ``load_server``, because a benchmark child on another
revision's interpreter imports this module and that revision may lack the test kit."""


def write_bench_file(workdir: Path | str) -> None:
    """Put ``BENCH_FILE`` (twenty short lines) in ``workdir``, which must exist."""
    lines = "".join(f"line {i}: alpha beta gamma delta\n" for i in range(1, 21))
    Path(workdir, BENCH_FILE).write_text(lines, encoding="utf-8")


@dataclass
class LoopbackServer:
    """``benchmarks.support.load_server`` running in its own process."""

    process: subprocess.Popen[str]
    port: int

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def stats(self) -> dict[str, int]:
        return server_stats(self.port)


@contextmanager
def loopback_server(
    rate: float,
    *,
    stall: bool = False,
    tool: str = "bench_tool",
    python: str = sys.executable,
    usage_from_size: bool = False,
) -> Iterator[LoopbackServer]:
    """Start the provider process, yield it once it listens, always stop it.

    ``tool`` is what its tool calls name (``load_server.TOOLS``); ``python`` the
    interpreter it runs on (one that has this checkout's ``toolprep`` installed: the
    server is the test kit's loopback provider). ``usage_from_size`` makes it report a
    request's input tokens from its size (``load_server --usage-from-size``). It runs in
    the repository's root, so ``benchmarks`` is importable whatever the caller's working
    directory.
    """
    command = [python, "-m", "benchmarks.support.load_server", "--rate", str(rate), "--tool", tool]
    if stall:
        command.append("--stall")
    if usage_from_size:
        command.append("--usage-from-size")
    with port_reporting_process(command, "load_server", cwd=REPO) as (process, port):
        yield LoopbackServer(process, port)


@contextmanager
def port_reporting_process(
    command: Sequence[str], name: str, cwd: Path | None = None
) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """Start a server process that prints its port as its first line; always stop it."""
    process = subprocess.Popen(list(command), cwd=cwd, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        if not line.isdigit():
            raise RuntimeError(f"{name} did not report a port (got {line!r})")
        yield process, int(line)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


def server_stats(port: int, timeout: float = 5.0) -> dict[str, int]:
    """``GET /stats`` over a fresh loopback connection (the server keeps no per-client state)."""
    with socket.create_connection((LOOPBACK, port), timeout=timeout) as sock:
        sock.sendall(b"GET /stats HTTP/1.1\r\nhost: localhost\r\ncontent-length: 0\r\n\r\n")
        data = b""
        deadline = time.monotonic() + timeout
        while b"\r\n\r\n" not in data and time.monotonic() < deadline:
            data += sock.recv(4096)
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        while len(body) < length and time.monotonic() < deadline:
            body += sock.recv(4096)
    stats: dict[str, int] = orjson.loads(body)
    return stats
