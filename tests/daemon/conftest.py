"""Start ``toolprep serve`` against the loopback provider, and stop it after the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.daemon_process import DaemonProcess, daemon_environment
from tests.support.runtime_harness import provider_base_url
from toolprep.testing import FakeProviderServer
from toolprep.testing.daemon import serve_command

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
        # The daemon file of a --no-persist daemon goes to the default data directory.
        data_home = {"XDG_DATA_HOME": str(tmp_path / "data-home")}
        env = daemon_environment({**data_home, **(env_extra or {})})
        command = serve_command(KIND, provider_base_url(KIND, provider), *options)
        log = tmp_path / f"daemon-{len(started)}.log"
        daemon = DaemonProcess(command, env, workdir, log)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.kill()
