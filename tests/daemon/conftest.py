"""Start ``toolprep serve`` against the loopback provider, and stop it after the test."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.daemon_process import DaemonProcess
from tests.support.fake_provider import FakeProviderServer
from tests.support.runtime_harness import provider_base_url

KIND = "anthropic"

StartDaemon = Callable[..., DaemonProcess]


@pytest.fixture
def provider() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as server:
        yield server


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def start_daemon(
    tmp_path: Path, provider: FakeProviderServer, workdir: Path
) -> Iterator[StartDaemon]:
    """``start_daemon(*options)``: a daemon on a free port; killed at the end if still up."""
    started: list[DaemonProcess] = []

    def start(*options: str, env_extra: dict[str, str] | None = None) -> DaemonProcess:
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        env.pop("TOOLPREP_TOKEN", None)
        env["ANTHROPIC_API_KEY"] = "test-key"
        env.update(env_extra or {})
        command = [
            sys.executable,
            "-m",
            "toolprep.runtime.cli",
            "serve",
            "--port",
            "0",
            "--provider",
            KIND,
            "--base-url",
            provider_base_url(KIND, provider),
            "--max-retries",
            "0",
            *options,
        ]
        log = tmp_path / f"daemon-{len(started)}.log"
        daemon = DaemonProcess(command, env, workdir, log)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.kill()
