"""``--synchronous`` reaches every connection to the store: the front's and each worker's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.daemon.conftest import StartDaemon


@pytest.mark.parametrize("level", ["normal", "full"])
def test_the_durability_level_reaches_the_front_and_every_worker(
    start_daemon: StartDaemon, workdir: Path, tmp_path: Path, level: str
) -> None:
    data = tmp_path / "data"
    options = ["--data-dir", str(data), "--workers", "2", "--log-level", "INFO"]
    if level == "full":
        options += ["--synchronous", "full"]  # normal is the default
    daemon = start_daemon(*options)
    client = daemon.client()
    try:
        client.start_session(workdir)  # its worker is up and its store open
    finally:
        client.close()
    assert daemon.stop() == 0
    opened = re.findall(r"opened the session store (\S+) \(synchronous (\w+)\)", daemon.stderr())
    # The front's connection and one per worker process.
    assert opened == [(str(data / "sessions.db"), level)] * 3, daemon.stderr()
