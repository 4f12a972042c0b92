"""One soak run: the provider, the daemon, the editors, the sampler and the worker kills.

The load runs for ``duration`` s while the sampler reads every ``sample_every`` s and a
worker is killed (SIGKILL) every ``kill_every`` s: always the youngest, so the oldest
lives through the run and its RSS shows growth that restarts would hide. Then the editors
stop (each finishes its episode), every connection is closed, and the daemon's gauges are
polled until live sessions, attached clients and open connections are all back to zero (a
dropped turn runs to its end, then the disconnect grace passes), or ``settle_timeout`` s
have passed.
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import _harness as h
from benchmarks.serve.daemon import serve_daemon
from benchmarks.soak_daemon.churn import Soak
from benchmarks.soak_daemon.meter import Sample, Sampler, metrics_gauges, worker_pids

__all__ = ["Plan", "Result", "run"]

JOIN_TIMEOUT_S = 240.0
"""How long the editors get to finish their last episode (a turn may wait for a restart)."""
LEFT_GAUGES = ("sessions_live", "clients_attached", "connections_open")


@dataclass(frozen=True)
class Plan:
    """What a run does: how long, how many editors, how the daemon and provider are set."""

    duration: float
    sample_every: float
    churners: int
    long_sessions: int
    reattach_every: int
    kill_every: float
    workers: int
    grace: float
    context_window: int
    rate: float
    settle_timeout: float
    seed: int
    log_level: str = "ERROR"
    daemon_log: Path | None = None


@dataclass(frozen=True)
class Result:
    """The samples, what the editors did, the gauges left after the end, the kills made."""

    samples: list[Sample]
    counts: dict[str, Any]
    left: dict[str, float]
    settle_s: float
    kills: int
    metrics_failures: int
    daemon_exit: int | None


def _kill_youngest(front: int) -> bool:
    """SIGKILL the worker started last, so the oldest one lives through the run."""
    workers = worker_pids(front)
    if len(workers) < 2:
        return False  # one is being replaced already: the next period kills
    try:
        os.kill(workers[-1], signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def _settle(url: str, token: str, timeout: float) -> tuple[dict[str, float], float]:
    """Poll the gauges until nothing is left (or ``timeout``); what was left, and when."""
    start = time.monotonic()
    left: dict[str, float] = {}
    while True:
        try:
            gauges = metrics_gauges(url, token)
            left = {name: gauges.get(name, 0.0) for name in LEFT_GAUGES}
        except OSError:
            left = {name: float("nan") for name in LEFT_GAUGES}
        if all(v == 0 for v in left.values()) or time.monotonic() - start > timeout:
            return left, time.monotonic() - start
        time.sleep(0.5)


def _bench_file(workdir: Path) -> None:
    workdir.mkdir()
    h.write_bench_file(workdir)


def run(plan: Plan, on_sample: Any = None) -> Result:
    """Run the soak; ``on_sample(sample)`` is called with each sample as it is taken."""
    with ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="toolprep-soak-")))
        workdir = scratch / "work"
        _bench_file(workdir)
        data = scratch / "data"
        server = stack.enter_context(
            h.loopback_server(plan.rate, tool="read_file", usage_from_size=True)
        )
        extra = [
            "--disconnect-grace",
            f"{plan.grace:g}",
            "--context-window",
            str(plan.context_window),
            "--log-level",
            plan.log_level,
        ]
        daemon = stack.enter_context(
            serve_daemon("anthropic", server.base_url, plan.workers, data, scratch, None, extra)
        )
        front = daemon.process.pid
        soak = Soak(daemon.url, daemon.token, str(workdir), plan.seed)
        threads = [
            threading.Thread(target=soak.churn, args=(n,), name=f"churn-{n}", daemon=True)
            for n in range(plan.churners)
        ] + [
            threading.Thread(
                target=soak.long_session,
                args=(n, plan.reattach_every),
                name=f"long-{n}",
                daemon=True,
            )
            for n in range(plan.long_sessions)
        ]
        start = time.monotonic()
        sampler = Sampler(front, data, daemon.url, daemon.token, start)
        for thread in threads:
            thread.start()
        samples: list[Sample] = []
        kills = 0
        next_sample = start
        # Half a period off, so no kill falls on the end of warm-up or the middle of a run
        # whose warm-up is a whole number of periods.
        next_kill = start + plan.kill_every / 2 if plan.kill_every > 0 else float("inf")
        end = start + plan.duration
        while (now := time.monotonic()) < end:
            if now >= next_kill:
                kills += _kill_youngest(front)
                next_kill += plan.kill_every
            if now >= next_sample:
                sample = sampler.sample(soak.counts.turns)
                samples.append(sample)
                if on_sample is not None:
                    on_sample(sample)
                next_sample += plan.sample_every
            time.sleep(max(0.0, min(next_sample, next_kill, end) - time.monotonic()))
        soak.stopping.set()
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        for thread in threads:
            thread.join(max(0.1, deadline - time.monotonic()))
        left, settle_s = _settle(daemon.url, daemon.token, plan.grace + plan.settle_timeout)
        exit_code = daemon.process.poll()
        if plan.daemon_log is not None:
            plan.daemon_log.write_text(daemon.stderr(), encoding="utf-8")
        return Result(
            samples=samples,
            counts=soak.counts.as_dict(),
            left=left,
            settle_s=settle_s,
            kills=kills,
            metrics_failures=sampler.metrics_failures,
            daemon_exit=exit_code,
        )
