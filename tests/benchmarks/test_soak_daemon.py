"""``benchmarks.soak_daemon --short`` soaks a real ``toolprep serve --workers 2`` and holds its
own bounds.

About half a minute of churning editors (sessions created, prompted, left, reattached,
loaded, closed, deleted, connections cut mid-turn), a long session compacting, workers
killed: the run exits 0 only if, after warm-up, the front's and the workers' RSS, threads
and descriptors grew at most 1.5x over the last half (a short run's bound, loose enough for
a busy two-core machine: it catches a runaway, the full run holds 5 %), the WAL stayed under
64 MiB, and once every client had closed the daemon's gauges came back to no live session,
no attached client and no open connection. The test also checks that the run did what it
claims (turns answered, a worker killed and replaced, a compaction, sessions reattached,
deleted and dropped), so a soak that silently did nothing cannot pass. The benchmark runs
as a command, the way it is used.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 400


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_the_short_soak_meets_its_bounds_and_leaves_no_session_or_connection(
    tmp_path: Path,
) -> None:
    report_path = tmp_path / "soak.json"

    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.soak_daemon", "--short", f"--report={report_path}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )

    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "every target met" in done.stdout
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert report["missed"] == []
    assert report["bounds"]["max_growth"] == 1.5
    assert report["left_after_close"] == {
        "sessions_live": 0.0,
        "clients_attached": 0.0,
        "connections_open": 0.0,
    }
    counts = report["counts"]
    assert counts["turns"] > 0 and counts["long_turns"] > 0
    assert counts["stop_reasons"].get("end_turn", 0) > 0
    for action in ("session/new", "session/load", "session/resume", "session/delete", "drop"):
        assert counts["actions"].get(action, 0) > 0, counts["actions"]
    assert report["kills"] > 0 and report["worker_restarts"] > 0
    assert report["compactions"] > 0
    samples = report["samples"]
    assert all(s["workers"] <= 2 for s in samples)
    assert max(s["front_rss_mib"] for s in samples) > 0
    assert max(s["workers_rss_mib"] for s in samples) > 0
    assert max(s["db_kib"] for s in samples) > 0
    assert max(s["sessions_live"] for s in samples) > 0
