"""``toolprep serve --workers 2`` whose workers keep dying, reached through ``toolprep
connect``: every request meeting a worker that waits out its restart back-off is answered
-32005 with ``retryAfter``, as ``toolprep acp --workers 2`` answers it, never -32603."""

from __future__ import annotations

from pathlib import Path

from tests.acp.test_worker_restarts import check_backoff_codes
from tests.daemon.conftest import KIND, StartDaemon
from tests.runtime import scenarios as sc
from tests.support.agent_process import AgentProcess, connect_command
from tests.support.daemon_process import daemon_environment
from toolprep.testing import FakeProviderServer


def test_every_request_meeting_a_worker_in_back_off_is_told_when_to_retry(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    daemon = start_daemon("--data-dir", str(data), "--workers", "2")
    # The turns that reach a worker between the kills, and the one served at the end.
    provider.enqueue(*[sc.ok(sc.text_turn(KIND)) for _ in range(200)])
    editor = AgentProcess(
        connect_command("--data-dir", str(data)),
        daemon_environment(),
        workdir,
        tmp_path / "connect.log",
    )
    try:
        check_backoff_codes(editor, daemon.process.pid, workdir)
        editor.close_input()
        assert editor.wait_exit() == 0
    finally:
        editor.kill()
    assert daemon.stop() == 0
