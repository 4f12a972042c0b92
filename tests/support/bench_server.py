"""Start the benchmark loopback provider (an asyncio server) in its own process."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def bench_server(rate: float = 0.0, stall: bool = False) -> Iterator[str]:
    """Yield the server's base URL (``http://127.0.0.1:PORT``)."""
    command = [sys.executable, "-m", "benchmarks.sse_server", "--rate", str(rate)]
    if stall:
        command.append("--stall")
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline().strip())
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)
