"""``python -m benchmarks.soak_daemon``: the options, the printed figures, the report, the exit.

Exits 1 when a target is missed (``growth.judge``), so a short run can assert its own
bounds; 2 for a usage error (``--plot`` without matplotlib among them).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import _harness as h
from benchmarks.soak_daemon.growth import FLAT, REPORTED, Bounds, growth, increase, judge
from benchmarks.soak_daemon.meter import Sample
from benchmarks.soak_daemon.plot import plot
from benchmarks.soak_daemon.run import Plan, Result, run

__all__ = ["main"]

DEFAULT_REPORT = h.REPORTS / "soak_daemon.json"
SHORT = {
    "duration": 30.0,
    "sample_every": 1.0,
    "churners": 4,
    "long_sessions": 1,
    "reattach_every": 10,
    "kill_every": 12.0,
    "grace": 2.0,
    "context_window": 8000,
    "rate": 0.0,
    "warmup": 0.4,
    "max_growth": 1.5,
}
"""``--short``: about half a minute for the process tier. Its growth bound (1.5x over the
last half) only catches a runaway on so short a run; the full run holds the issue's 5 %."""


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.soak_daemon",
        description="Soak toolprep serve --workers N with churning editors, long sessions and "
        "worker kills; print growth after warm-up as ratios and exit 1 if a target is missed.",
    )
    add = parser.add_argument
    add("--short", action="store_true", help=f"a half-minute run with looser bounds: {SHORT}")
    add("--duration", type=float, default=900.0, help="seconds of load (default 900)")
    add("--warmup", type=float, default=0.33, help="share of the run that is warm-up (0.33)")
    add("--sample-every", type=float, default=5.0, help="seconds between samples (default 5)")
    add("--churners", type=int, default=8, help="editors running episodes (default 8)")
    add("--long-sessions", type=int, default=2, help="sessions prompted all run (default 2)")
    add("--reattach-every", type=int, default=100, help="long session turns per reattach")
    add("--kill-every", type=float, default=180.0, help="seconds between worker kills; 0: none")
    add("--workers", type=int, default=2)
    add("--grace", type=float, default=10.0, help="the daemon's --disconnect-grace (default 10)")
    add("--context-window", type=int, default=16000, help="tokens; long sessions compact")
    add("--rate", type=float, default=0.0, help="provider events/s per stream (0: unpaced)")
    add("--settle-timeout", type=float, default=120.0, help="wait for the gauges after grace")
    add("--max-growth", type=float, default=1.05, help="bound on last-half growth (1.05)")
    add("--wal-limit-mib", type=float, default=64.0, help="bound on the WAL's size (64)")
    add("--seed", type=int, default=5)
    add("--log-level", default="ERROR", help="the daemon's --log-level (default ERROR)")
    add("--daemon-log", type=Path, help="copy the daemon's stderr here at the end")
    add("--report", type=Path, default=DEFAULT_REPORT)
    add("--plot", type=Path, help="write a PNG of the samples (needs matplotlib, not a dependency)")
    if parser.parse_args(argv).short:
        parser.set_defaults(**SHORT)  # what the command line gives still wins
    args = parser.parse_args(argv)
    if args.plot is not None and importlib.util.find_spec("matplotlib") is None:
        parser.error(
            "--plot needs matplotlib, which toolprep does not depend on: pip install matplotlib"
        )
    return args


def _commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=h.REPO, capture_output=True, text=True
    )
    return done.stdout.strip() or "unknown"


def _print_sample(sample: Sample) -> None:
    print(
        f"{sample.at:7.1f}s turns {sample.turns:6d}  rss front {sample.front_rss_mib:6.1f} "
        f"workers {sample.workers_rss_mib:6.1f} MiB  threads {sample.front_threads}/"
        f"{sample.workers_threads}  fds {sample.front_fds}/{sample.workers_fds}  "
        f"db {sample.db_kib / 1024:6.1f} wal {sample.wal_kib / 1024:5.1f} MiB  "
        f"live {sample.sessions_live:g} clients {sample.clients_attached:g} "
        f"buf {sample.send_buffer_kib:.0f} KiB",
        flush=True,
    )


def _report(args: argparse.Namespace, plan: Plan, result: Result, warmup_end: float) -> int:
    try:
        ratios = growth(result.samples, warmup_end, plan.workers)
    except ValueError as exc:  # too few samples to compare: nothing can be said to be met
        print(f"MISSED: {exc}")
        return 1
    bounds = Bounds(args.max_growth, args.wal_limit_mib)
    verdict = judge(ratios, result.samples, warmup_end, result.left, bounds)
    counts = result.counts
    compactions = result.samples[-1].compactions
    restarts = increase([s.worker_restarts for s in result.samples])
    print(
        f"\n{counts['turns']} turns ({counts['long_turns']} in long sessions), "
        f"{counts['sessions_created']} sessions created, {counts['connections']} connections, "
        f"{result.kills} worker kills, {result.samples[-1].compactions:g} compactions"
    )
    print(f"actions: {counts['actions']}")
    print(f"stop reasons: {counts['stop_reasons']}; prompt errors: {counts['prompt_errors']}")
    print(f"call errors: {counts['call_errors']}")
    print(f"\ngrowth after warm-up ({warmup_end:.0f} s), medians of windows:")
    print(f"{'series':18} {'warm-up':>10} {'middle':>10} {'end':>10} {'since':>7} {'last half':>9}")
    for name in REPORTED:
        g = ratios[name]
        flag = " <- flat target" if name in FLAT else ""
        print(
            f"{name:18} {g.start:10.1f} {g.middle:10.1f} {g.end:10.1f} "
            f"{g.since_warmup:7.3f} {g.last_half:9.3f}{flag}"
        )
    wal_peak = max(s.wal_kib for s in result.samples) / 1024
    print(
        f"WAL peak {wal_peak:.1f} MiB; send buffers peak "
        f"{max(s.send_buffer_kib for s in result.samples):.0f} KiB"
    )
    print(f"after every client closed: {result.left} ({result.settle_s:.1f} s to settle)")
    report = {
        "commit": _commit(),
        "plan": vars(plan),
        "bounds": vars(bounds),
        "warmup_end_s": warmup_end,
        "counts": counts,
        "kills": result.kills,
        "worker_restarts": restarts,
        "compactions": compactions,
        "left_after_close": result.left,
        "settle_s": result.settle_s,
        "metrics_failures": result.metrics_failures,
        "ratios": {
            name: {**vars(g), "since_warmup": g.since_warmup, "last_half": g.last_half}
            for name, g in ratios.items()
        },
        "wal_peak_mib": wal_peak,
        "missed": list(verdict.missed),
        "samples": [s.row() for s in result.samples],
    }
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(report, indent=1, default=_jsonable), encoding="utf-8")
    print(f"wrote {args.report}")
    if args.plot is not None:
        title = (
            f"toolprep serve --workers {plan.workers}, {plan.duration / 60:.0f} min soak "
            f"({counts['turns']} turns, {result.kills} worker kills)"
        )
        bases = {name: g.start for name, g in ratios.items()}
        plot(args.plot, result.samples, warmup_end, bases, title)
        print(f"wrote {args.plot}")
    for line in verdict.missed:
        print(f"MISSED: {line}")
    print("every target met" if verdict.ok else f"{len(verdict.missed)} target(s) missed")
    return 0 if verdict.ok else 1


def _jsonable(value: Any) -> Any:
    return str(value)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    # A connection the soak cuts on purpose makes the client library log the end it saw.
    logging.getLogger("websockets").setLevel(logging.CRITICAL)
    plan = Plan(
        duration=args.duration,
        sample_every=args.sample_every,
        churners=args.churners,
        long_sessions=args.long_sessions,
        reattach_every=args.reattach_every,
        kill_every=args.kill_every,
        workers=args.workers,
        grace=args.grace,
        context_window=args.context_window,
        rate=args.rate,
        settle_timeout=args.settle_timeout,
        seed=args.seed,
        log_level=args.log_level,
        daemon_log=args.daemon_log,
    )
    print(f"soaking for {plan.duration:g} s: {plan}", flush=True)
    started = time.monotonic()
    result = run(plan, _print_sample)
    print(f"done in {time.monotonic() - started:.0f} s", flush=True)
    if result.daemon_exit is not None:
        print(f"MISSED: the daemon exited {result.daemon_exit} during the run")
        return 1
    return _report(args, plan, result, args.warmup * args.duration)


if __name__ == "__main__":
    sys.exit(main())
