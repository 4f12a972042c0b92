"""``toolprep connect`` at the end of stdin: every request it forwarded gets its reply first.

A client that pipes its requests in and closes stdin, the way a script does
(``printf '<initialize>\\n<session/new>\\n<session/list>\\n' | toolprep connect``),
must read every reply before ``connect`` exits, whether the daemon was already
running or ``--start`` starts it. Run several times each: losing replies was a
race, not a constant.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import orjson
import pytest

from tests.daemon.conftest import StartDaemon
from tests.support.acp_schema import validate_agent_message
from tests.support.agent_process import connect_command
from tests.support.daemon_process import daemon_environment, stop_started_daemons

RUNS = 4


def _piped(cwd: Path) -> bytes:
    """initialize, session/new and session/list, one line each, as ``printf`` writes them."""
    requests = [
        {"method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}},
        {"method": "session/new", "params": {"cwd": str(cwd), "mcpServers": []}},
        {"method": "session/list", "params": {}},
    ]
    return b"".join(
        orjson.dumps({"jsonrpc": "2.0", "id": n, **request}) + b"\n"
        for n, request in enumerate(requests, 1)
    )


def _replies_to_the_pipe(cwd: Path, *options: str) -> list[int]:
    """Pipe the three requests into ``toolprep connect OPTIONS``; the ids answered."""
    done = subprocess.run(
        connect_command(*options),
        input=_piped(cwd),
        capture_output=True,
        cwd=cwd,
        env=daemon_environment(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    messages = [orjson.loads(line) for line in done.stdout.splitlines()]
    for message in messages:
        validate_agent_message(message)
    assert all("result" in message for message in messages if "id" in message), messages
    return [message["id"] for message in messages if "id" in message]


def test_every_piped_request_is_answered_by_a_running_daemon(
    start_daemon: StartDaemon, workdir: Path, tmp_path: Path
) -> None:
    data = str(tmp_path / "data")
    daemon = start_daemon("--data-dir", data, "--workers", "1")
    for _ in range(RUNS):
        assert _replies_to_the_pipe(workdir, "--data-dir", data) == [1, 2, 3]
    assert daemon.stop() == 0


@pytest.mark.timeout(300)
def test_every_piped_request_is_answered_by_the_daemon_start_starts(
    workdir: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    try:
        for run in range(RUNS):  # the first starts it, the others find it running
            data_dir = data / str(run) if run % 2 else data
            options = ("--data-dir", str(data_dir), "--start", "--", "--workers", "1")
            assert _replies_to_the_pipe(workdir, *options) == [1, 2, 3]
    finally:
        stop_started_daemons(data)
        for run in range(1, RUNS, 2):
            stop_started_daemons(data / str(run))
