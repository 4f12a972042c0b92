"""``python -m benchmarks.serve``: the command line, the runs in order and the report file."""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from benchmarks import _harness as h
from benchmarks import serve as package
from benchmarks.serve.daemon import Side
from benchmarks.serve.long_load import run_long_load
from benchmarks.serve.report import (
    evaluate,
    print_details,
    print_table,
    print_verdicts,
    sqlite_cost,
)
from benchmarks.serve.run import RAMP_S, run_serve
from benchmarks.serve.stdio import run_stdio

__all__ = ["DEFAULT_REPORT", "compare_revisions", "main"]

DEFAULT_REPORT = h.REPORTS / "serve.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(package.__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--rate", type=float, default=20.0, help="provider events/s per session")
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before measuring")
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="--workers for toolprep acp / serve (default: the command's own default)",
    )
    parser.add_argument("--provider", choices=("anthropic", "openai"), default="anthropic")
    parser.add_argument("--load-turns", type=int, default=500, help="turns of the long session")
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=60.0,
        help="before each run wait up to this many seconds for other processes to go idle",
    )
    parser.add_argument("--report", type=Path, default=DEFAULT_REPORT)
    parser.add_argument(
        "--baseline-python",
        default=None,
        metavar="PATH",
        help="only the serve run, once per --event-loops value and once on this interpreter "
        "(another revision's, from benchmarks.revision), interleaved; no stdio, db or load runs",
    )
    parser.add_argument(
        "--event-loops",
        default="",
        help="with --baseline-python: the new daemon's --event-loop values, comma-separated",
    )
    args = parser.parse_args(argv)
    if args.sessions < 1 or args.connections < 1 or args.load_turns < 1:
        parser.error("--sessions, --connections and --load-turns must be positive")
    if args.workers is not None and args.workers < 1:
        parser.error("--workers must be positive")
    from toolprep.runtime.workers import default_worker_count

    workers = args.workers if args.workers is not None else default_worker_count()

    def quiet() -> None:
        if args.wait_quiet > 0:
            other = h.wait_for_quiet(max_wait=args.wait_quiet)
            if other >= 0.3:
                print(f"  (other processes still use {other:.2f} cores; measuring anyway)")

    if args.baseline_python:
        return compare_revisions(args, quiet)
    print(f"stdio N={args.sessions} workers={workers}: running ...", flush=True)
    quiet()
    stdio = run_stdio(args, workers)
    runs = [stdio]
    with ExitStack() as stack:
        scratch, workdir, server = _bench_setting(stack, args.rate)
        for label, data_dir in (("serve", None), ("serve+db", scratch / "data")):
            print(
                f"{label} N={args.sessions} over {args.connections} connections: running ...",
                flush=True,
            )
            quiet()
            runs.append(run_serve(label, server, args, str(workdir), scratch, data_dir))
        print(f"load of a {args.load_turns}-turn session: running ...", flush=True)
        long_load = run_long_load(server, args, str(workdir), scratch)
    serve, persisted = runs[1], runs[2]

    print()
    print(
        f"provider {args.provider}, rate {args.rate:g} events/s per session, "
        f"{args.duration:g} s measured after {args.warmup:g} s, workers {workers}"
        f"{'' if args.workers is not None else ' (the command default)'}, "
        f"{os.cpu_count()} cores shared by the daemon, the clients and the provider"
    )
    print_table(runs)
    print()
    print_details(runs, long_load)
    print()
    cost = sqlite_cost(serve, persisted)
    targets = evaluate(stdio, serve, persisted, long_load)
    print_verdicts(targets, cost)
    report = {
        "benchmark": "serve",
        "machine": h.machine_info(),
        "config": {
            "sessions": args.sessions,
            "connections": args.connections,
            "rate": args.rate,
            "duration": args.duration,
            "warmup": args.warmup,
            "ramp": RAMP_S,
            "workers": workers,
            "workers_flag_given": args.workers is not None,
            "provider": args.provider,
            "load_turns": args.load_turns,
        },
        "runs": runs,
        "sqlite_cost": cost,
        "long_session_load": long_load,
        "targets": targets,
    }
    h.write_report(args.report, report)
    print(f"\nreport: {args.report}")
    return 0


def _bench_setting(stack: ExitStack, rate: float) -> tuple[Path, Path, h.LoopbackServer]:
    """A scratch directory, the sessions' working directory in it, and the loopback provider."""
    scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="toolprep-serve-")))
    workdir = scratch / "work"
    workdir.mkdir()
    h.write_bench_file(workdir)
    return scratch, workdir, stack.enter_context(h.loopback_server(rate, tool="read_file"))


def compare_revisions(args: argparse.Namespace, quiet: Callable[[], None]) -> int:
    """The serve run on this revision (per event loop) and on ``--baseline-python``'s."""
    loops = [loop for loop in args.event_loops.split(",") if loop]
    sides = {f"serve:{loop}": Side(event_loop=loop) for loop in loops} or {"serve": Side()}
    sides["serve:base"] = Side(python=args.baseline_python)
    runs = []
    with ExitStack() as stack:
        scratch, workdir, server = _bench_setting(stack, args.rate)
        for label, side in sides.items():
            print(f"{label} N={args.sessions} over {args.connections} connections: running ...")
            quiet()
            runs.append(run_serve(label, server, args, str(workdir), scratch, None, side))
    print()
    print_table(runs)
    print()
    for r in runs:
        print(f"  {r['label']}: stop reasons {r['stop_reasons']}, errors {r['prompt_errors']}")
    h.write_report(args.report, {"benchmark": "serve-revisions", "runs": runs})
    print(f"\nreport: {args.report}")
    return 0
