"""The stdio baseline: ``benchmarks.load``'s ``cli`` run, ``toolprep acp --no-persist``
over two pipes."""

from __future__ import annotations

import argparse
from typing import Any

from benchmarks import _harness as h
from benchmarks._load_child import ChildSpec, run_child
from benchmarks.serve.run import RAMP_S

__all__ = ["run_stdio"]


def run_stdio(args: argparse.Namespace, workers: int) -> dict[str, Any]:
    """``benchmarks.load``'s ``cli`` run: ``toolprep acp --no-persist`` over two pipes."""
    with h.loopback_server(args.rate, tool="read_file") as server:
        spec = ChildSpec.against(
            server,
            args.provider,
            mode="cli",
            sessions=args.sessions,
            rate=args.rate,
            duration=args.duration,
            ramp=RAMP_S,
            warmup=args.warmup,
            workers=workers,
        )
        run = run_child(spec)
    run["label"] = "stdio"
    run["connections"] = None
    turns_window = run["turns_per_s"] * run["window_s"]
    cpu = run["cpu"]
    cpu["per_turn_us"] = round(cpu["runtime_s"] / turns_window * 1e6, 1) if turns_window else None
    cpu["client_cores"] = round(cpu["harness_s"] / run["window_s"], 3)
    cpu["loopback_server_cores"] = round(cpu["loopback_server_s"] / run["window_s"], 3)
    return run
