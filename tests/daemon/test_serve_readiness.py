"""``/readyz`` follows the store: 503 while it cannot be written, 200 once it can again;
``/healthz`` stays 200 throughout (the daemon is alive, and recovers by itself)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.telemetry_daemon import get, http_base, replay_daemon
from tests.support.eventually import eventually
from tests.support.small_disk import SmallDisk, small_disk
from toolprep.runtime.store import SessionStore


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    with small_disk(tmp_path / "data") as mounted:
        yield mounted


def _wait_status(url: str, status: int, timeout: float = 60.0) -> None:
    eventually(lambda: get(url).status == status, timeout=timeout, what=f"{url} is {status}: ")


def test_ready_only_while_the_store_can_be_written(tmp_path: Path, disk: SmallDisk) -> None:
    SessionStore(disk.path / "sessions.db").close()  # a store there from an earlier run
    writable = disk.refuse_writes("read_only")
    daemon = replay_daemon(
        tmp_path,
        "--workers",
        "1",
        data_dir=disk.path,
        env_extra={"TOOLPREP_TOKEN": secrets.token_urlsafe(16)},
    )
    base = http_base(daemon)
    try:
        not_ready = get(base + "/readyz")
        assert (not_ready.status, not_ready.body) == (503, "not ready\n")
        assert get(base + "/healthz").status == 200
        writable()
        _wait_status(base + "/readyz", 200)
        assert get(base + "/healthz").status == 200
    finally:
        try:
            assert daemon.stop() == 0
        finally:
            daemon.kill()
