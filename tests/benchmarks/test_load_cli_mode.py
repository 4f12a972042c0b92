"""``benchmarks.load --mode cli`` drives the real ``toolprep acp`` process end to end.

A benchmark that silently measures an agent which never answered would
print plausible-looking zeros, so this runs one short, fast-paced CLI run
and checks that the command really streamed, prepared, ran its tool and
answered. No figure is judged: the machine is shared. The benchmark runs
as a command, the way it is used (the tests import no benchmark code).
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


def test_cli_mode_drives_the_command_and_reports_it(tmp_path: Path) -> None:
    report_path = tmp_path / "load.json"

    done = _load(
        "--mode=cli",
        "--cli-args=--log-level ERROR",
        "--workers=1,2",
        "--sessions=2",
        "--rate=200",
        "--duration=1.5",
        "--ramp=0.1",
        "--warmup=0.3",
        "--wait-quiet=0",
        f"--report={report_path}",
    )

    assert done.returncode == 0, done.stderr
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert report["config"]["modes"] == ["cli"]
    assert report["config"]["cli_args"] == ["--log-level", "ERROR"]
    assert report["baseline"] is None and report["side_by_side"] == []
    assert report["config"]["workers"] == [1, 2]
    single, spread = report["runs"]
    # The meters cover the agent and its workers: one process, then the front and two workers.
    assert (single["agent"], single["workers"], single["processes"]) == ("cli-w1", 1, 1)
    assert (spread["agent"], spread["workers"], spread["processes"]) == ("cli-w2", 2, 3)
    for run in (single, spread):
        assert (run["mode"], run["tool"]) == ("cli", "read_file")
        assert run["cli_args"] == ["--log-level", "ERROR"]
        # Streamed, prepared and answered over the run. (The window's figures may be zero on a
        # busy machine that spent the short window starting the agent.)
        totals = run["totals"]
        assert totals["frames"] > 0 and totals["preparing_frames"] > 0, totals
        assert run["stop_reasons"].get("end_turn", 0) > 0
        assert totals["turns"] == sum(run["stop_reasons"].values()), totals
        assert run["prompt_errors"] == 0 and run["client_errors"] == 0
        assert run["failed_tool_calls"] == 0
        assert run["threads"]["peak"] > 0 and run["rss_kib"]["after_sessions"] > 0
        assert run["cpu"]["process_s"] > 0
    assert spread["threads"]["peak"] > single["threads"]["peak"]  # the workers' threads count
    assert "cli-w1/aiohttp" in done.stdout and "cli-w2/aiohttp" in done.stdout


def test_unknown_mode_is_refused_with_the_choices() -> None:
    done = _load("--mode", "embedded,daemon")

    assert done.returncode == 2
    assert "--mode takes embedded, cli (got 'embedded,daemon')" in done.stderr


def test_a_baseline_python_without_toolprep_is_refused_before_any_run(tmp_path: Path) -> None:
    done = _load("--mode=cli", f"--baseline-python={sys.base_prefix}/bin/python3", "--wait-quiet=0")

    assert done.returncode == 2
    assert "--baseline-python: " in done.stderr and "cannot import toolprep" in done.stderr
    assert "running ..." not in done.stdout


def test_baseline_python_runs_each_scenario_on_both_sides_and_reports_them_side_by_side(
    tmp_path: Path,
) -> None:
    """The baseline side runs from a directory holding only a link to ``benchmarks/``: here
    on this same interpreter, so both sides measure the same ``toolprep``."""
    report_path = tmp_path / "load.json"

    done = _load(
        "--mode=embedded",
        "--sessions=2",
        "--rate=200",
        "--duration=1",
        "--ramp=0.1",
        "--warmup=0.3",
        "--wait-quiet=0",
        f"--baseline-python={sys.executable}",
        f"--report={report_path}",
    )

    assert done.returncode == 0, done.stderr
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert [(r["side"], r["scenario"]) for r in report["runs"]] == [
        ("current", "actors/aiohttp/anthropic"),
        ("baseline", "actors/aiohttp/anthropic"),
    ]
    assert report["baseline"]["python"] == sys.executable
    (row,) = report["side_by_side"]
    assert (row["scenario"], row["sessions"]) == ("actors/aiohttp/anthropic", 2)
    assert set(row["figures"]) == {"events/s", "p50 ms", "p99 ms", "us/ev", "gen cores"}
    for run in report["runs"]:
        assert run["totals"]["preparing_frames"] > 0 and run["prompt_errors"] == 0
    assert "current vs baseline" in done.stdout
