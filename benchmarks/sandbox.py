"""What the sandbox costs a shell command: the same command sandboxed and not, interleaved.

The real ``run_shell_command`` tool (``RunShellCommandTool``) runs each of
``--commands`` (default ``true``, ``ls -la /usr/bin > /dev/null``,
``python3 -c pass``) through ``tool.execute`` in a temporary session directory,
twice over: once with no sandbox and once with the sandbox the runtime builds
under the default ``--sandbox auto`` (``sandbox_from_options``: ``bwrap`` with
the data directory and the credential files hidden, no network, the default
limits set inside the sandbox by ``prlimit``, or by a Python launcher without it).
Both tools share one environment policy (``EnvironmentPolicy.for_agent``), so
the only difference is the sandbox. After ``--warmup`` runs of each, the two are run ``--repeat``
times alternately (unsandboxed, sandboxed, unsandboxed, ...) so that whatever
else the machine does hits both alike. Wall time is taken around
``tool.execute``: the spawn, the command, reading its output and reaping it.

Printed per command: median and p90 of both, in ms, the ratio of the medians
(sandboxed / unsandboxed) and their difference in ms. Then where the
difference goes, the parts spawned directly (``subprocess.run``, no tool) the
same number of times, interleaved: ``sh -c true``; the Python limits launcher's
interpreter alone (``python -I -S -c pass``); ``bwrap`` around ``sh -c true``
without the limits, once with nothing hidden and once with the sandbox's own
arguments; the wrapped command line with the launcher setting the limits (what a
machine without ``prlimit`` runs); and the whole wrapped command line as the tool
runs it. Last the
one-time cost of the probe that decides whether a sandbox can be had: the
first ``probe()`` of the process (what the runtime pays once) and fresh
``_probe`` runs after it. The load average before and after is printed, since
figures taken on a busy machine spread. When no sandbox can be had here the
reason is printed and the script exits 2.

The runtime also hides the directories of its other sessions from each
command; with no runtime here there are none, so that part of ``wrap`` does
no work.

Run: ``python -m benchmarks.sandbox [--repeat 30] [--warmup 3]
[--commands CMD ...] [--report path]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from benchmarks import _harness as h
from toolprep.runtime.hosting.assembly import sandbox_from_options
from toolprep.runtime.hosting.options import RuntimeOptions
from toolprep.runtime.tools.base import ToolContext
from toolprep.runtime.tools.config import ToolConfig
from toolprep.runtime.tools.environment import EnvironmentPolicy
from toolprep.runtime.tools.sandbox import Sandbox, SandboxStatus, _probe, probe
from toolprep.runtime.tools.shell import RunShellCommandTool

DEFAULT_COMMANDS = ("true", "ls -la /usr/bin > /dev/null", "python3 -c pass")
DEFAULT_REPORT = h.REPORTS / "sandbox.json"
FRESH_PROBES = 5
"""Fresh ``_probe`` runs after the first ``probe()``."""
STEP_TIMEOUT_S = 60.0
"""The longest one command (or one directly spawned part) may take."""


@dataclass
class Pair:
    """Wall times in nanoseconds of one thing done without and with the sandbox."""

    plain_ns: list[int] = field(default_factory=list)
    sandboxed_ns: list[int] = field(default_factory=list)


def _ms(value_ns: float) -> float:
    return value_ns / 1e6


def summary(values_ns: Sequence[int]) -> dict[str, Any]:
    """median / p90 / min / max in ms."""
    ordered = sorted(values_ns)
    p90 = h.percentile(ordered, 90.0)
    return {
        "count": len(ordered),
        "median_ms": round(_ms(statistics.median(ordered)), 3),
        "p90_ms": None if p90 is None else round(_ms(p90), 3),
        "min_ms": round(_ms(ordered[0]), 3),
        "max_ms": round(_ms(ordered[-1]), 3),
    }


def compare(pair: Pair) -> dict[str, Any]:
    plain, sandboxed = summary(pair.plain_ns), summary(pair.sandboxed_ns)
    return {
        "unsandboxed": plain,
        "sandboxed": sandboxed,
        "ratio_of_medians": round(sandboxed["median_ms"] / plain["median_ms"], 2),
        "difference_ms": round(sandboxed["median_ms"] - plain["median_ms"], 3),
    }


class Runner:
    """Runs a command through the real tool, with or without the sandbox, in ``cwd``."""

    def __init__(self, sandbox: Sandbox, cwd: Path) -> None:
        config = ToolConfig(allow_shell=True)
        environment = EnvironmentPolicy.for_agent(configured_key=None)
        self.plain = RunShellCommandTool(config, environment=environment, sandbox=None)
        self.sandboxed = RunShellCommandTool(config, environment=environment, sandbox=sandbox)
        self.cwd = cwd
        self.calls = 0

    def time_ns(self, tool: RunShellCommandTool, command: str) -> int:
        """Wall time of one ``execute``; raises if the command did not exit 0."""
        self.calls += 1
        ctx = ToolContext(
            session_id="bench-sandbox",
            cwd=self.cwd,
            tool_call_id=f"call_{self.calls}",
            timeout=STEP_TIMEOUT_S,
        )
        started = time.perf_counter_ns()
        output = tool.execute({"command": command}, ctx)
        elapsed = time.perf_counter_ns() - started
        raw = output.raw_output
        if not isinstance(raw, dict) or raw.get("exit_code") != 0:
            where = "sandboxed" if tool.sandbox is not None else "unsandboxed"
            raise RuntimeError(f"{command!r} failed {where}: {output.llm_output[-400:]}")
        return elapsed

    def measure(self, command: str, warmup: int, repeat: int) -> Pair:
        for _ in range(warmup):
            self.time_ns(self.plain, command)
            self.time_ns(self.sandboxed, command)
        pair = Pair()
        for _ in range(repeat):
            pair.plain_ns.append(self.time_ns(self.plain, command))
            pair.sandboxed_ns.append(self.time_ns(self.sandboxed, command))
        return pair


def spawn_ns(argv: Sequence[str], cwd: Path) -> int:
    """Wall time of one ``subprocess.run`` of ``argv``, which must exit 0."""
    started = time.perf_counter_ns()
    subprocess.run(
        argv,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        check=True,
        timeout=STEP_TIMEOUT_S,
    )
    return time.perf_counter_ns() - started


def _limits_by(sandbox: Sandbox) -> str:
    return "prlimit" if sandbox.prlimit is not None else "python launcher"


def parts(sandbox: Sandbox, cwd: Path, warmup: int, repeat: int) -> dict[str, list[int]]:
    """Where the sandbox's cost goes: its pieces spawned directly, interleaved."""
    shell = ["/bin/sh", "-c", "true"]
    wrapped = sandbox.wrap(shell, cwd=str(cwd))
    bwrap_only = [*wrapped[: wrapped.index("--") + 1], *shell]  # the sandbox, no limits
    bare = replace(sandbox, hidden=()).wrap(shell, cwd=str(cwd))
    bare_bwrap = [*bare[: bare.index("--") + 1], *shell]  # nor any hidden path
    # What sets the limits where prlimit is missing: an interpreter start per command.
    with_launcher = replace(sandbox, prlimit=None).wrap(shell, cwd=str(cwd))
    pieces: dict[str, list[str]] = {
        "sh -c true": shell,
        "python -I -S -c pass (the launcher's interpreter)": [
            sys.executable,
            "-I",
            "-S",
            "-c",
            "pass",
        ],
        "bwrap, nothing hidden ... sh -c true (no limits)": bare_bwrap,
        "bwrap ... sh -c true (no limits)": bwrap_only,
        "bwrap ... python launcher ... sh -c true (no prlimit)": with_launcher,
        f"bwrap ... {_limits_by(sandbox)} ... sh -c true (as the tool runs it)": wrapped,
    }
    times: dict[str, list[int]] = {name: [] for name in pieces}
    for round_ in range(warmup + repeat):
        for name, argv in pieces.items():
            elapsed = spawn_ns(argv, cwd)
            if round_ >= warmup:
                times[name].append(elapsed)
    return times


def timed_s(call: Callable[[], SandboxStatus]) -> tuple[SandboxStatus, float]:
    started = time.perf_counter()
    status = call()
    return status, time.perf_counter() - started


def print_table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        cells = [row[0].ljust(widths[0])]
        cells += [cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)]
        print("  ".join(cells))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--commands",
        nargs="+",
        default=list(DEFAULT_COMMANDS),
        metavar="CMD",
        help="shell command lines to time (default: %(default)s)",
    )
    parser.add_argument("--repeat", type=int, default=30, help="timed runs per side (default 30)")
    parser.add_argument(
        "--warmup", type=int, default=3, help="untimed runs per side first (default 3)"
    )
    parser.add_argument("--report", type=Path, default=DEFAULT_REPORT)
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.warmup < 0:
        parser.error("--repeat must be >= 1 and --warmup >= 0")

    status, first_probe_s = timed_s(probe)  # the first call of the process really probes
    if status.state != "on":
        print(f"no sandbox here: {status.reason}")
        return 2
    sandbox = sandbox_from_options(RuntimeOptions())  # as the runtime builds it (auto)
    if sandbox is None:
        print("no sandbox here: sandbox_from_options gave none")
        return 2
    fresh_probe_s = []
    for _ in range(FRESH_PROBES):
        fresh, elapsed = timed_s(lambda: _probe("bwrap"))
        if fresh.state != "on":
            print(f"a fresh probe found no sandbox: {fresh.reason}")
            return 2
        fresh_probe_s.append(elapsed)

    results: dict[str, dict[str, Any]] = {}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="toolprep-bench-sandbox-") as tmp:
        cwd = Path(tmp)
        mounted = sandbox._hidden_paths(os.path.realpath(cwd))
        runner = Runner(sandbox, cwd)
        for command in args.commands:
            results[command] = compare(runner.measure(command, args.warmup, args.repeat))
        spawned = parts(sandbox, cwd, args.warmup, args.repeat)
    load_after = os.getloadavg()

    print(
        f"sandbox: {sandbox.bwrap}, network {'on' if sandbox.network else 'off'}, "
        f"{len(sandbox.hidden)} hidden paths named, {len(mounted)} of them here to hide; "
        f"{args.repeat} runs per side after {args.warmup} warm-up, interleaved; "
        f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after "
        f"({os.cpu_count()} cpus)"
    )
    rows = []
    for command, got in results.items():
        plain, boxed = got["unsandboxed"], got["sandboxed"]
        rows.append(
            [
                command,
                f"{plain['median_ms']:.2f}",
                f"{plain['p90_ms']:.2f}",
                f"{boxed['median_ms']:.2f}",
                f"{boxed['p90_ms']:.2f}",
                f"{got['ratio_of_medians']:.2f}x",
                f"{got['difference_ms']:+.2f}",
            ]
        )
    print_table(
        rows,
        [
            "command (run_shell_command)",
            "plain p50",
            "p90",
            "sandboxed p50",
            "p90",
            "ratio",
            "diff ms",
        ],
    )
    print("\nparts, spawned directly (ms):")
    part_summaries = {name: summary(values) for name, values in spawned.items()}
    print_table(
        [
            [name, f"{got['median_ms']:.2f}", f"{got['p90_ms']:.2f}"]
            for name, got in part_summaries.items()
        ],
        ["", "p50", "p90"],
    )
    fresh_median = statistics.median(fresh_probe_s)
    print(
        f"\nprobe, once per process: first probe() {first_probe_s * 1e3:.1f} ms; "
        f"fresh _probe median {fresh_median * 1e3:.1f} ms "
        f"(min {min(fresh_probe_s) * 1e3:.1f}, max {max(fresh_probe_s) * 1e3:.1f}; "
        f"{FRESH_PROBES} runs)"
    )

    report = {
        "benchmark": "sandbox",
        "machine": h.machine_info(),
        "config": {
            "commands": list(args.commands),
            "repeat": args.repeat,
            "warmup": args.warmup,
            "bwrap": sandbox.bwrap,
            "network": sandbox.network,
            "limits": sandbox.limits.argv(),
            "hidden": [str(path) for path in sandbox.hidden],
            "hidden_here": mounted,
        },
        "load_average": {"before": load_before[0], "after": load_after[0]},
        "commands": results,
        "parts": part_summaries,
        "probe": {
            "first_probe_ms": round(first_probe_s * 1e3, 3),
            "fresh_probe_ms": [round(s * 1e3, 3) for s in fresh_probe_s],
            "fresh_probe_median_ms": round(fresh_median * 1e3, 3),
        },
    }
    h.write_report(args.report, report)
    print(f"report: {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
