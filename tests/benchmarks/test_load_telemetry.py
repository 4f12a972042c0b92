"""``benchmarks.load --telemetry off,on`` measures the runtime with its OpenTelemetry on.

A comparison whose "on" side never exported would print a reassuring ratio of nothing, so
this runs one tiny pair and checks that both ran, that spans and metrics reached the
loopback receiver, and that the ratio and the verdict are printed. No figure is judged:
the machine is shared. The benchmark runs as a command, the way it is used.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _load(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.load", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_telemetry_off_and_on_run_side_by_side_and_the_on_run_exports(tmp_path: Path) -> None:
    report_path = tmp_path / "load.json"

    done = _load(
        "--telemetry=off,on",
        "--sessions=2",
        "--rate=200",
        "--duration=1",
        "--ramp=0.1",
        "--warmup=0.3",
        "--wait-quiet=0",
        f"--report={report_path}",
    )

    assert done.returncode == 0, done.stderr
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert report["config"]["telemetry"] == ["off", "on"]
    off, on = report["runs"]
    assert (off["telemetry"], on["telemetry"]) == ("off", "on")
    for run in (off, on):
        assert run["totals"]["preparing_frames"] > 0 and run["prompt_errors"] == 0
        assert run["failed_tool_calls"] == 0
    assert off["otlp_received"] is None
    received = on["otlp_received"]  # at the latest, the last export at shutdown
    assert received["traces"]["requests"] > 0 and received["traces"]["items"] > 0, received
    assert received["metrics"]["requests"] > 0 and received["metrics"]["items"] > 0, received
    (row,) = report["telemetry_overhead"]["rows"]
    assert (row["provider"], row["sessions"]) == ("anthropic", 2)
    assert set(row["per_event_us"]) == {"off", "on", "ratio"}
    assert report["telemetry_overhead"]["target"]["verdict"] in ("PASS", "MISS")
    assert "actors/aiohttp/anthropic+otel" in done.stdout
    assert "telemetry off vs on" in done.stdout and "on/off" in done.stdout
    assert "ratio on/off <= 1.05" in done.stdout


def test_an_unknown_telemetry_state_is_refused_with_the_choices() -> None:
    done = _load("--telemetry", "off,maybe")

    assert done.returncode == 2
    assert "--telemetry takes off, on (got 'off,maybe')" in done.stderr
