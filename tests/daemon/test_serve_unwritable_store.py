"""``toolprep serve`` whose data directory is on a full or read-only disk starts (serving
without its daemon file when it was given its token), lists and loads the stored sessions,
refuses new sessions and turns by cause, and takes them once the disk takes writes again;
so does one whose data directory is empty, not ready until it can create its store."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.conftest import KIND, StartDaemon
from tests.daemon.telemetry_daemon import get, http_base
from tests.support.daemon_process import DaemonProcess
from tests.support.degraded_store import (
    crashed_session,
    degrade_and_recover,
    discarded_after_recovery,
    empty_and_recover,
    locked_and_recover,
)
from tests.support.eventually import eventually
from tests.support.small_disk import SmallDisk, Unwritable, small_disk
from toolprep.testing import FakeProviderServer


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    with small_disk(tmp_path / "data") as mounted:
        yield mounted


@pytest.mark.parametrize(("condition", "workers"), [("full", "1"), ("read_only", "2")])
def test_a_daemon_on_an_unwritable_disk_serves_what_is_stored_and_recovers(
    start_daemon: StartDaemon,
    provider: FakeProviderServer,
    workdir: Path,
    disk: SmallDisk,
    condition: Unwritable,
    workers: str,
) -> None:
    db = disk.path / "sessions.db"
    crashed_session(db, workdir)
    clear = disk.refuse_writes(condition)
    daemon = _daemon_given_its_token(start_daemon, disk, workers)
    client = daemon.client()
    try:
        client.initialize()
        degrade_and_recover(client, workdir, provider, clear, KIND)

        def discarded() -> bool:
            assert discarded_after_recovery(db) == ["preparing", "discarded"], daemon.stderr()
            return True

        eventually(discarded, timeout=60, interval=0.2)  # with workers, the front's probe writes it
    finally:
        client.close()
    assert daemon.stop() == 0
    assert "can be written again" in daemon.stderr()


def _daemon_given_its_token(
    start_daemon: StartDaemon, disk: SmallDisk, workers: str
) -> DaemonProcess:
    """A daemon on the unwritable disk, given its token, as it must be: it cannot write the
    daemon file that would say it."""
    daemon = start_daemon(
        "--data-dir",
        str(disk.path),
        "--workers",
        workers,
        env_extra={"TOOLPREP_TOKEN": secrets.token_urlsafe(16)},
    )
    assert f"no daemon file: cannot write {disk.path / 'serve.json'}" in daemon.stderr()
    return daemon


def test_a_daemon_without_its_token_and_its_file_refuses_to_start(
    start_daemon: StartDaemon, disk: SmallDisk, workdir: Path
) -> None:
    crashed_session(disk.path / "sessions.db", workdir)
    disk.read_only()
    with pytest.raises(
        AssertionError, match=r"(?s)the daemon exited 2: .*cannot write the daemon file"
    ):
        start_daemon("--data-dir", str(disk.path), "--workers", "1")


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_daemon_on_an_empty_read_only_data_directory_starts_not_ready_and_recovers(
    start_daemon: StartDaemon,
    provider: FakeProviderServer,
    workdir: Path,
    disk: SmallDisk,
    workers: str,
) -> None:
    disk.read_only()
    daemon = _daemon_given_its_token(start_daemon, disk, workers)
    ready = http_base(daemon) + "/readyz"
    assert get(ready).status == 503
    client = daemon.client()
    try:
        client.initialize()
        cause = empty_and_recover(client, workdir, provider, disk.writable, KIND)
    finally:
        client.close()
    assert cause == "Read-only file system", cause
    eventually(lambda: get(ready).status == 200, timeout=60, what="/readyz is 200: ")
    assert daemon.stop() == 0
    assert "cannot be written (Read-only file system)" in daemon.stderr()
    assert "can be written again" in daemon.stderr()


def test_a_daemon_whose_store_another_process_locks_lists_and_refuses_new_sessions(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    daemon = start_daemon("--data-dir", str(data), "--workers", "2")
    client = daemon.client()
    try:
        client.initialize()
        client.result(client.request("session/new", {"cwd": str(workdir), "mcpServers": []}))
        cause = locked_and_recover(client, workdir, data / "sessions.db", provider, KIND)
    finally:
        client.close()
    assert cause == "database is locked", cause
    assert daemon.stop() == 0
