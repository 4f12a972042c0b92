"""The ``toolprep serve`` command line against a loopback provider.

For a test that starts the daemon (``subprocess.Popen(serve_command("anthropic",
server.base_url))``) against ``FakeProviderServer``; toolprep's own tests and benchmarks
start it this way.
"""

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
