"""The ``toolprep serve`` command line the tests and the benchmarks start a daemon with."""

from __future__ import annotations

import sys

__all__ = ["serve_command"]


def serve_command(
    provider: str, base_url: str, *options: str, python: str = sys.executable
) -> list[str]:
    """``toolprep serve`` run by ``python`` on a free loopback port, against the provider at
    ``base_url``, with no retries (a test or a benchmark wants to see a failure, not wait)."""
    return [
        python,
        "-m",
        "toolprep.runtime.cli",
        "serve",
        "--port",
        "0",
        "--provider",
        provider,
        "--base-url",
        base_url,
        "--max-retries",
        "0",
        *options,
    ]
