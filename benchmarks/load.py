"""Load: many concurrent sessions through the real runtime, ACP connection included.

For each session count N and each scenario a fresh child process
(``benchmarks._load_child``) runs the whole stack: the loopback provider
(``benchmarks.support.load_server``, its own process, started here) streams realistic turns
at ``--rate`` events/s per stream; the runtime reads them with the real SDK provider; the
real ``AcpAgent`` and ``JsonRpcConnection`` take ``session/new`` / ``session/prompt``
lines from one pipe and write every ``session/update`` to another, which a drain thread
reads and parses like an editor would. Every session loops prompts until the measured
window ends.

Per run it reports provider events/s (``GET /stats`` deltas over the window), frames/s,
preparing-card latency (server send stamp in the tool-call id -> frame read from the
pipe), peak thread count, RSS per idle session, CPU per event (process CPU less the
editor-side threads') and the cores the load generator (those threads) used.

Scenarios (one table, ``scenarios``): ``--mode embedded`` runs the runtime in the child
once per ``--transport`` (the SDKs' aiohttp client on the runtime's default loop, their
httpx client, aiohttp on asyncio's loop or on uvloop) and once per other ``--host``
(``workers``: the worker front over ``--shards`` processes; ``ray``: over ``--shards``
Ray shard actors, ``benchmarks._hosts``); ``--mode cli`` runs the real ``toolprep acp``
command once per ``--workers`` count, its stdio on two pipes, its built-in ``read_file``
as the tool; each for every ``--provider`` wire. ``--gc default`` leaves the collector
and the allocator untuned.

``--baseline-python PATH`` runs every local scenario a second time on another
interpreter, the ``toolprep`` installed there (``python -m benchmarks.revision REF``
makes one for a git revision), and prints both sides and their ratios in one table.

``--telemetry off,on`` runs every embedded scenario on the local host with the runtime's
OpenTelemetry off and on (traces and metrics exported over OTLP to a loopback receiver in
this process, ``support.otlp_sink``) and prints CPU per event on over off against the
+5 % target (``benchmarks._telemetry_overhead``).

Run: ``python -m benchmarks.load [--mode embedded,cli] [--host local,workers,ray]
[--shards 2] [--sessions 1,100,1000] [--rate 20] [--duration 10]
[--provider anthropic,openai] [--telemetry off,on]
[--transport aiohttp,httpx,aiohttp-asyncio,aiohttp-uvloop] [--gc daemon|default]
[--cli-args=ARGS] [--baseline-python PATH] [--plot out.png] [--report path]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from benchmarks import _harness as h
from benchmarks import _telemetry_overhead as otel
from benchmarks._load_child import ChildMode, ChildSpec, cli_label
from benchmarks._transports import TRANSPORTS
from benchmarks.support.otlp_sink import otlp_sink

__all__ = ["Options", "Scenario", "Side", "main", "mode_ratios", "scenarios", "side_by_side"]

DEFAULT_REPORT = h.REPORTS / "load.json"

TARGET_P99_MS = 5.0
TARGET_THREADS = 32
TARGET_RSS_KIB = 50.0
TARGET_RATE_SHARE = 0.9
"""A run 'holds' N x R events/s when the server got at least this share of it out."""
GENERATOR_LIMIT_CORES = 0.8
"""Load-generator threads busier than this are themselves what holds delivery back."""
MACHINE_LIMIT_SHARE = 0.9
"""All processes together busier than this share of the cores: the machine is the limit."""

AGENT_MODES = ("embedded", "cli")
"""``--mode``: the runtime in the benchmark's child process, or the ``toolprep acp`` command
(once per ``--workers`` count)."""
HOSTS = ("local", "workers", "ray")
PROVIDERS = ("anthropic", "openai")
TELEMETRY = ("off", "on")
GC_MODES = ("daemon", "default")
RATIO_FIGURES = {
    "events/s": ("events_per_s",),
    "p99": ("preparing_latency_ms", "p99"),
    "us/ev": ("cpu", "per_event_us"),
    "threads": ("threads", "peak"),
    "KiB/session": ("rss_kib", "per_idle_session"),
}
"""Figures compared between modes of one run, as paths into a run's report."""
SIDE_FIGURES = {
    "events/s": ("events_per_s",),
    "p50 ms": ("preparing_latency_ms", "p50"),
    "p99 ms": ("preparing_latency_ms", "p99"),
    "us/ev": ("cpu", "per_event_us"),
    "gen cores": ("cpu", "harness_cores"),
}
"""Figures ``--baseline-python`` puts side by side, as paths into a run's report."""

SideName = Literal["current", "baseline"]


@dataclass(frozen=True)
class Side:
    """The interpreter a run's child uses, and so the ``toolprep`` it measures."""

    name: SideName
    python: str
    toolprep: dict[str, str] | None = None
    """Where that interpreter's ``toolprep`` comes from, and its version (baseline only)."""


@dataclass(frozen=True)
class Scenario:
    """One configuration of the agent, run once per session count (and per side)."""

    mode: ChildMode
    provider: str
    transport: str = "aiohttp"
    workers: int = 1
    host: str = "local"
    telemetry: str = "off"

    def label(self, shards: int) -> str:
        match self.mode:
            case "cli":
                name = cli_label(self.workers)
            case "actors":
                name = "actors" if self.host == "local" else f"host-{self.host}{shards}"
        otel_on = "+otel" if self.telemetry == "on" else ""
        return f"{name}/{self.transport}/{self.provider}{otel_on}"


@dataclass(frozen=True)
class Options:
    """The command line, checked."""

    modes: list[str]
    counts: list[int]
    providers: list[str]
    transports: list[str]
    workers: list[int]
    hosts: list[str]
    telemetry: list[str]
    cli_args: list[str]
    sides: list[Side]
    args: argparse.Namespace

    @property
    def agents(self) -> list[str]:
        """The agents targets are judged for: ``embedded`` and one per cli worker count."""
        cli = [cli_label(w) for w in self.workers] if "cli" in self.modes else []
        return [*(["embedded"] if "embedded" in self.modes else []), *cli]


def scenarios(options: Options) -> list[Scenario]:
    """The table of runs per session count, in the order they run."""
    table: list[Scenario] = []
    for provider in options.providers:
        if "embedded" in options.modes:
            # Telemetry off and on back to back, so both meet the same machine.
            table += [
                Scenario("actors", provider, t, telemetry=otel_state)
                for t in options.transports
                for otel_state in options.telemetry
            ]
            # Other hosts on the runtime's own transport (the first listed).
            table += [
                Scenario("actors", provider, options.transports[0], host=host)
                for host in options.hosts
                if host != "local"
            ]
        if "cli" in options.modes:
            # The command's provider always uses the runtime's own transport.
            table += [Scenario("cli", provider, "aiohttp", w) for w in options.workers]
    return table


# --- orchestration (parent process) ----------------------------------------------------------


def _spawn(scenario: Scenario, sessions: int, options: Options, side: Side) -> dict[str, Any]:
    """Run one configuration in a fresh interpreter so runs cannot disturb each other."""
    args = options.args
    if args.wait_quiet > 0:
        load = h.wait_for_quiet(max_wait=args.wait_quiet)
        if load >= 0.3:
            print(f"  (other processes still use {load:.2f} cores; measuring anyway)", flush=True)
    tool = "read_file" if scenario.mode == "cli" else "bench_tool"
    with (
        h.loopback_server(args.rate, tool=tool) as server,
        tempfile.TemporaryDirectory(prefix="toolprep-load-") as scratch,
        otlp_sink() as sink,  # in this process: receiving is not the runtime's CPU
    ):
        telemetry = scenario.telemetry == "on"
        spec = ChildSpec.against(
            server,
            scenario.provider,
            mode=scenario.mode,
            sessions=sessions,
            rate=args.rate,
            duration=args.duration,
            ramp=args.ramp,
            warmup=args.warmup,
            pools=args.http_pools,
            keepalive=args.keepalive,
            gc_threshold=_gc_threshold(args.gc_threshold),
            gc_freeze=args.gc_freeze,
            transport=scenario.transport,
            gc_mode=args.gc,
            cli_args=tuple(options.cli_args) if scenario.mode == "cli" else (),
            workers=scenario.workers,
            host=scenario.host,
            shards=args.shards,
            telemetry_environ=(
                otel.telemetry_environ(sink.endpoint, args.trace_sample) if telemetry else None
            ),
        )
        spec_path, out_path = Path(scratch, "spec.json"), Path(scratch, "run.json")
        spec_path.write_text(spec.to_json(), encoding="utf-8")
        timeout = args.duration + args.ramp + args.warmup + 240
        h.run_benchmark_module(side.python, "_load_child", [str(spec_path), str(out_path)], timeout)
        result: dict[str, Any] = json.loads(out_path.read_text(encoding="utf-8"))
        result["otlp_received"] = sink.summary() if telemetry else None
    result["side"] = side.name
    result["scenario"] = scenario.label(args.shards)
    return result


def _gc_threshold(text: str | None) -> tuple[int, ...] | None:
    return tuple(int(x) for x in text.split(",")) if text else None


def run_all(options: Options) -> list[dict[str, Any]]:
    """Every scenario at every N on every side; a baseline side only runs local hosts."""
    runs: list[dict[str, Any]] = []
    for n in options.counts:
        for scenario in scenarios(options):
            for side in options.sides:
                if side.name == "baseline" and scenario.host != "local":
                    continue  # worker and Ray hosts import this checkout's benchmarks
                print(f"{side.name} {scenario.label(options.args.shards)} N={n}: running ...")
                sys.stdout.flush()
                runs.append(_spawn(scenario, n, options, side))
    return runs


# --- figures ------------------------------------------------------------------------------------


def _figure(run: dict[str, Any], path: Sequence[str]) -> Any:
    value: Any = run
    for key in path:
        value = value[key]
    return value


def _difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 3)


def _ratio(a: float | None, b: float | None) -> float | None:
    if not a or not b:
        return None
    return round(a / b, 2)


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def _fmt(value: Any, spec: str = "") -> str:
    if value is None:
        return "-"
    return format(value, spec)


def _telemetry_off(run: dict[str, Any]) -> bool:
    return bool(run.get("telemetry", "off") == "off")


def _label(run: dict[str, Any]) -> str:
    name = run["agent"] if run.get("workers") else run["mode"]
    otel_on = "" if _telemetry_off(run) else "+otel"
    label = f"{name}/{run['transport']}/{run['provider']}{otel_on}"
    return label if run.get("side", "current") == "current" else f"{label} (base)"


def limit(run: dict[str, Any]) -> str:
    """What held delivery below the offered rate: ``-`` when it was held."""
    offered = run["offered_events_per_s"] or 0
    if offered and run["events_per_s"] >= TARGET_RATE_SHARE * offered:
        return "-"
    cpu = run["cpu"]
    if cpu["harness_cores"] >= GENERATOR_LIMIT_CORES:
        return "generator"
    window = run["window_s"]
    busy = cpu["process_s"] / window + cpu["loopback_server_s"] / window
    if run["agent"] != "embedded":
        busy += cpu["harness_cores"]  # the generator is this process, not the agent's
    busy += cpu["other_processes_cores"]
    cpus = os.cpu_count() or 1
    return "machine" if busy >= MACHINE_LIMIT_SHARE * cpus else "runtime"


def mode_ratios(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each non-embedded run's figures over the embedded run of the same N, transport,
    wire and side."""

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r["sessions"], r["transport"], r["provider"], r.get("side"))

    embedded = {key(r): r for r in runs if r["agent"] == "embedded" and _telemetry_off(r)}
    out: list[dict[str, Any]] = []
    for run in runs:
        base = embedded.get(key(run))
        if run["agent"] == "embedded" or base is None:
            continue
        latency, base_latency = run["preparing_latency_ms"], base["preparing_latency_ms"]
        out.append(
            {
                "mode": _label(run),
                "against": base["mode"],
                "sessions": run["sessions"],
                "transport": run["transport"],
                "provider": run["provider"],
                "ratios": {
                    name: _ratio(_figure(run, path), _figure(base, path))
                    for name, path in RATIO_FIGURES.items()
                },
                "added_latency_ms": {
                    q: _difference(latency[q], base_latency[q]) for q in ("p50", "p99")
                },
            }
        )
    return out


def side_by_side(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each scenario and N run on both sides: both figures and current / baseline."""
    baseline = {(r["scenario"], r["sessions"]): r for r in runs if r.get("side") == "baseline"}
    rows: list[dict[str, Any]] = []
    for run in runs:
        base = baseline.get((run["scenario"], run["sessions"]))
        if run.get("side") != "current" or base is None:
            continue
        figures = {
            name: {
                "current": _figure(run, path),
                "baseline": _figure(base, path),
                "ratio": _ratio(_figure(run, path), _figure(base, path)),
            }
            for name, path in SIDE_FIGURES.items()
        }
        rows.append(
            {
                "scenario": run["scenario"],
                "sessions": run["sessions"],
                "offered_events_per_s": run["offered_events_per_s"],
                "figures": figures,
                "limit": {"current": limit(run), "baseline": limit(base)},
            }
        )
    return rows


def evaluate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """PASS/MISS per target, judged at the largest N (the scenario the targets name)."""
    largest = max(runs, key=lambda r: r["sessions"])
    offered = largest["offered_events_per_s"] or 0
    share = largest["events_per_s"] / offered if offered else 0.0
    p99 = largest["preparing_latency_ms"]["p99"]
    peaks = [r["threads"]["peak"] for r in runs]
    rss = largest["rss_kib"]["per_idle_session"]
    return {
        "throughput_and_p99": {
            "target": f"{largest['sessions']} sessions x "
            f"{largest['rate_per_session']:g} events/s held "
            f"(>= {TARGET_RATE_SHARE:.0%} delivered) with preparing p99 <= {TARGET_P99_MS} ms",
            "events_share": round(share, 3),
            "p99_ms": p99,
            "limit": limit(largest),
            "verdict": _verdict(
                share >= TARGET_RATE_SHARE and p99 is not None and p99 <= TARGET_P99_MS
            ),
        },
        "threads_constant": {
            "target": f"peak threads constant in N (spread <= 2) and <= {TARGET_THREADS}",
            "peaks_by_n": {str(r["sessions"]): r["threads"]["peak"] for r in runs},
            "verdict": _verdict(max(peaks) <= TARGET_THREADS and max(peaks) - min(peaks) <= 2),
        },
        "rss_per_idle_session": {
            "target": f"<= {TARGET_RSS_KIB} KiB per idle session (at N={largest['sessions']})",
            "kib": rss,
            "verdict": _verdict(rss <= TARGET_RSS_KIB),
        },
    }


def targets_by_agent(runs: list[dict[str, Any]], options: Options) -> dict[str, Any]:
    """Targets per agent on the current side, the first wire, the runtime's own transport,
    the first ``--telemetry`` state."""
    first = options.transports[0]
    current = [
        r
        for r in runs
        if r["side"] == "current"
        and r["provider"] == options.providers[0]
        and r.get("telemetry", "off") == options.telemetry[0]
    ]
    out: dict[str, Any] = {}
    for agent in options.agents:
        mine = [r for r in current if r["agent"] == agent]
        chosen = [r for r in mine if r["transport"] == first] or mine
        if chosen:
            out[agent] = evaluate(chosen)
    return out


# --- printing -------------------------------------------------------------------------------------


def print_table(runs: list[dict[str, Any]]) -> None:
    header = (
        f"{'run':<30}{'N':>6}{'events/s':>10}{'offered':>9}{'frames/s':>10}{'turns/s':>9}"
        f"{'p50 ms':>8}{'p99 ms':>8}{'max ms':>8}{'preps':>7}{'thr':>5}{'KiB/s':>7}"
        f"{'us/ev':>7}{'cores':>7}{'gen':>6}{'other':>7}  limit"
    )
    print(header)
    print("-" * len(header))
    for r in runs:
        lat, cpu = r["preparing_latency_ms"], r["cpu"]
        print(
            f"{_label(r):<30}{r['sessions']:>6}{r['events_per_s']:>10.0f}"
            f"{_fmt(r['offered_events_per_s'], '.0f'):>9}"
            f"{r['frames_per_s']:>10.0f}{r['turns_per_s']:>9.1f}"
            f"{_fmt(lat['p50'], '.2f'):>8}{_fmt(lat['p99'], '.2f'):>8}{_fmt(lat['max'], '.1f'):>8}"
            f"{lat['count']:>7}{r['threads']['peak']:>5}{r['rss_kib']['per_idle_session']:>7.1f}"
            f"{_fmt(cpu['per_event_us'], '.1f'):>7}{cpu['runtime_cores']:>7.2f}"
            f"{cpu['harness_cores']:>6.2f}{cpu['other_processes_cores']:>7.2f}  {limit(r)}"
        )


def print_side_by_side(rows: list[dict[str, Any]], baseline: dict[str, str]) -> None:
    print(f"\ncurrent vs baseline ({baseline['python']}: toolprep {baseline['version']}):")
    header = f"{'scenario':<30}{'N':>6}" + "".join(
        f"{name + ' cur':>15}{'base':>9}{'x':>6}" for name in SIDE_FIGURES
    )
    print(header + "  limit cur/base")
    print("-" * (len(header) + 16))
    for row in rows:
        cells = "".join(
            f"{_fmt(f['current'], '.2f'):>15}{_fmt(f['baseline'], '.2f'):>9}"
            f"{_fmt(f['ratio'], '.2f'):>6}"
            for f in row["figures"].values()
        )
        limits = row["limit"]
        print(
            f"{row['scenario']:<30}{row['sessions']:>6}{cells}  "
            f"{limits['current']}/{limits['baseline']}"
        )
    print("x: current / baseline. gen: cores of the load generator (the editor-side threads).")


def print_breakdown(run: dict[str, Any]) -> None:
    busy = sorted(run["cpu"]["by_thread_s"].items(), key=lambda kv: -kv[1])
    window = run["window_s"]
    parts = ", ".join(
        f"{name} {sec / window * 100:.0f}%" for name, sec in busy if sec / window >= 0.01
    ) or ("not visible from outside the process" if run["agent"] != "embedded" else "-")
    print(
        f"  {_label(run)} N={run['sessions']}: CPU by thread (share of one core): {parts}; "
        f"loopback server {run['cpu']['loopback_server_s'] / window * 100:.0f}%"
    )


def print_loop_and_gc(run: dict[str, Any]) -> None:
    lag, gcp = run["stream_loop_lag_ms"], run["gc_pauses"]
    if lag is None or gcp is None:
        return  # not measurable from outside the agent's process
    gc_max = max(
        (g["max_ms"] for k, g in gcp.items() if k.startswith("gen") and g["max_ms"]),
        default=None,
    )
    print(
        f"  {_label(run)} N={run['sessions']}: gc pause max {gc_max} ms; "
        f"stream-loop lag p50 {lag['p50']} / p99 {lag['p99']} "
        f"/ max {lag['max']} ms; gc gen2 {gcp['gen2']['count']}x "
        f"max {gcp['gen2']['max_ms']} ms, all gens {gcp['share_of_window']:.1%} of the window; "
        f"threads at peak {run['threads']['names_at_peak']}"
    )


def print_ratios(ratios: list[dict[str, Any]]) -> None:
    for ratio in ratios:
        figures = ", ".join(f"{k} {_fmt(v, '.2f')}x" for k, v in ratio["ratios"].items())
        added = ratio["added_latency_ms"]
        print(
            f"  N={ratio['sessions']}: {ratio['mode']} / embedded {ratio['against']} "
            f"({ratio['transport']}, {ratio['provider']}): {figures}; "
            f"added p50 {_fmt(added['p50'], '+.2f')} ms, p99 {_fmt(added['p99'], '+.2f')} ms"
        )


def print_transports(runs: list[dict[str, Any]]) -> None:
    by_n: dict[tuple[int, str, str], dict[str, Any]] = {}
    for r in runs:
        if r["agent"] == "embedded" and _telemetry_off(r):
            by_n.setdefault((r["sessions"], r["provider"], r["side"]), {})[r["transport"]] = r
    for (n, provider, side), by_transport in by_n.items():
        if len(by_transport) > 1:
            per_event = {t: r["cpu"]["per_event_us"] for t, r in by_transport.items()}
            print(f"  N={n} {provider} ({side}): CPU us per provider event {per_event}")


def print_targets(targets: dict[str, Any]) -> None:
    for agent, agent_targets in targets.items():
        print()
        for t in agent_targets.values():
            detail = {k: v for k, v in t.items() if k not in ("target", "verdict")}
            prefix = f"[{agent}] " if len(targets) > 1 else ""
            print(f"{prefix}{t['verdict']}  {t['target']}  {detail}")


def plot(path: Path, runs: list[dict[str, Any]]) -> bool:
    """Latency distribution per run, and events/s and p99 against N, one line per mode.

    Needs matplotlib.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot needs matplotlib, which is not a dependency: pip install matplotlib")
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    for r in runs:
        sample = sorted(r["preparing_latency_sample_ms"])
        if not sample:
            continue
        ys = [(i + 1) / len(sample) for i in range(len(sample))]
        lat = r["preparing_latency_ms"]
        left.plot(
            sample,
            ys,
            label=f"{_label(r)} N={r['sessions']} (p99 {lat['p99']:.2f} ms, n={lat['count']})",
        )
    left.axvline(
        TARGET_P99_MS,
        color="red",
        linestyle="--",
        linewidth=1,
        label=f"target p99 {TARGET_P99_MS} ms",
    )
    left.axhline(0.99, color="grey", linestyle=":", linewidth=1)
    left.set_xscale("log")
    left.set_xlabel("preparing frame latency, server send -> read from pipe (ms, log)")
    left.set_ylabel("fraction of preparing frames")
    left.set_title("Preparing-card latency (CDF)")
    left.legend(fontsize=8, loc="lower right")
    left.grid(True, which="both", alpha=0.3)

    lines: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        lines.setdefault(_label(r), []).append(r)
    twin = right.twinx()
    for (label, line), marker in zip(lines.items(), "osD^v<>", strict=False):
        line.sort(key=lambda r: r["sessions"])
        ns = [r["sessions"] for r in line]
        right.plot(ns, [r["events_per_s"] for r in line], f"{marker}:", label=f"events/s ({label})")
        twin.plot(
            ns,
            [r["preparing_latency_ms"]["p99"] or 0 for r in line],
            f"{marker}-",
            label=f"preparing p99 ms ({label})",
        )
    offered = sorted({(r["sessions"], r["offered_events_per_s"]) for r in runs})
    right.plot(
        [n for n, _ in offered],
        [o for _, o in offered],
        "--",
        color="grey",
        alpha=0.5,
        label="offered N x rate",
    )
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("concurrent sessions N (log)")
    right.set_ylabel("provider events/s (log, dotted)")
    twin.axhline(TARGET_P99_MS, color="red", linestyle="--", linewidth=1)
    twin.set_yscale("log")
    twin.set_ylabel("preparing p99 (ms, log, solid; dashed: target)")
    handles = right.get_legend_handles_labels()
    twin_handles = twin.get_legend_handles_labels()
    right.legend(
        handles[0] + twin_handles[0], handles[1] + twin_handles[1], fontsize=8, loc="upper left"
    )
    right.set_title("Throughput and p99 against N")
    right.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# --- the command line -----------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    add = parser.add_argument
    add(
        "--mode",
        default="embedded",
        help="comma-separated agents to drive: embedded (the runtime in the child process), "
        "cli (the toolprep acp command in its own process)",
    )
    add(
        "--cli-args",
        default="",
        help="extra options for toolprep acp in cli mode, one shell-quoted string "
        "(write --cli-args='--opt value' when it starts with a dash)",
    )
    add("--workers", default="1,2", help="comma-separated --workers values for the cli mode")
    add(
        "--host",
        default="local",
        help="comma-separated session hosts behind the embedded agent: local (always run), "
        "workers (worker processes), ray (shard actors on a local Ray cluster; needs ray)",
    )
    add("--shards", type=int, default=2, help="worker processes / Ray shards for --host")
    add("--sessions", default="1,100,1000", help="comma-separated session counts")
    add("--rate", type=float, default=20.0, help="provider events/s per session")
    add("--duration", type=float, default=10.0, help="measured seconds per run")
    add("--provider", default="anthropic", help="comma-separated wires: anthropic, openai")
    add(
        "--telemetry",
        default="off",
        help="comma-separated states of the runtime's OpenTelemetry for embedded runs on the "
        "local host: off, on (traces and metrics exported over OTLP to a loopback receiver); "
        "off,on runs both and prints CPU per event on over off",
    )
    add(
        "--trace-sample",
        type=float,
        default=1.0,
        help="with telemetry on, the share of turns traced (below 1: the SDK's "
        "parentbased_traceidratio sampler); metrics are always recorded whole",
    )
    add(
        "--transport",
        default="aiohttp",
        help=f"comma-separated HTTP stacks for embedded runs: {', '.join(TRANSPORTS)}",
    )
    add(
        "--gc",
        choices=GC_MODES,
        default="daemon",
        help="daemon: the agent's start-up tuning of the collector and the allocator "
        "(as the CLI does); default: CPython's and glibc's",
    )
    add("--ramp", type=float, default=1.0, help="seconds over which first prompts start")
    add("--warmup", type=float, default=1.5, help="seconds after the ramp before measuring")
    add("--http-pools", type=int, default=1, help="what-if: streams over this many SDK clients")
    add("--keepalive", type=int, default=None, help="what-if: keep-alive connections per pool")
    add("--gc-threshold", default=None, help="what-if: gc.set_threshold values, e.g. 50000,20,1000")
    add("--gc-freeze", action="store_true", help="what-if: gc.freeze() once the sessions are open")
    add(
        "--wait-quiet",
        type=float,
        default=180.0,
        help="before each run wait up to this many seconds for other processes to go idle",
    )
    add(
        "--baseline-python",
        default=None,
        help="also run every local scenario on this interpreter's installed toolprep and "
        "print both sides with ratios (python -m benchmarks.revision REF makes one)",
    )
    add("--plot", type=Path, default=None, help="write a PNG of latency and N curves")
    add("--report", type=Path, default=DEFAULT_REPORT)
    return parser


def _csv(value: str) -> list[str]:
    return [x.strip() for x in value.split(",") if x.strip()]


def _choices(
    parser: argparse.ArgumentParser, flag: str, value: str, allowed: Sequence[str]
) -> list[str]:
    chosen = _csv(value)
    if not chosen or set(chosen) - set(allowed):
        parser.error(f"{flag} takes {', '.join(allowed)} (got {value!r})")
    return chosen


def _counts(parser: argparse.ArgumentParser, flag: str, value: str) -> list[int]:
    try:
        counts = [int(x) for x in _csv(value)]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        parser.error(f"{flag} takes positive counts (got {value!r})")
    return counts


def _sides(parser: argparse.ArgumentParser, baseline: str | None) -> list[Side]:
    current = Side("current", sys.executable)
    if baseline is None:
        return [current]
    if not Path(baseline).is_file():
        parser.error(f"--baseline-python {baseline}: no such interpreter")
    baseline = os.path.abspath(baseline)  # not resolved: a virtualenv's python is a link
    try:
        installed = h.installed_toolprep(baseline)
    except RuntimeError as exc:
        parser.error(f"--baseline-python: {exc}")
    return [current, Side("baseline", baseline, installed)]


def parse_options(argv: list[str] | None) -> Options:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.shards < 1:
        parser.error(f"--shards takes a count >= 1 (got {args.shards})")
    try:
        cli_args = shlex.split(args.cli_args)
    except ValueError as exc:
        parser.error(f"--cli-args is not a valid shell-quoted string: {exc}")
    return Options(
        modes=_choices(parser, "--mode", args.mode, AGENT_MODES),
        counts=_counts(parser, "--sessions", args.sessions),
        providers=_choices(parser, "--provider", args.provider, PROVIDERS),
        transports=_choices(parser, "--transport", args.transport, TRANSPORTS),
        workers=_counts(parser, "--workers", args.workers),
        hosts=_choices(parser, "--host", args.host, HOSTS),
        telemetry=_choices(parser, "--telemetry", args.telemetry, TELEMETRY),
        cli_args=cli_args,
        sides=_sides(parser, args.baseline_python),
        args=args,
    )


def _config(options: Options) -> dict[str, Any]:
    args = options.args
    return {
        "modes": options.modes,
        "hosts": options.hosts,
        "shards": args.shards,
        "workers": options.workers,
        "cli_args": options.cli_args,
        "sessions": options.counts,
        "rate": args.rate,
        "duration": args.duration,
        "providers": options.providers,
        "transports": options.transports,
        "telemetry": options.telemetry,
        "gc": args.gc,
        "ramp": args.ramp,
        "warmup": args.warmup,
        "http_pools": args.http_pools,
        "keepalive": args.keepalive,
        "gc_threshold": args.gc_threshold,
        "gc_freeze": args.gc_freeze,
    }


def report_runs(runs: list[dict[str, Any]], options: Options) -> dict[str, Any]:
    """Print every table and verdict; return the JSON report."""
    args = options.args
    print(
        f"\nrate {args.rate:g} events/s per session, {args.duration:g} s measured per run, "
        f"{os.cpu_count()} cores"
    )
    print_table(runs)
    print()
    for run in runs:
        print_breakdown(run)
    for run in runs:
        print_loop_and_gc(run)
    ratios = mode_ratios(runs)
    print_ratios(ratios)
    print_transports(runs)
    targets = targets_by_agent(runs, options)
    print_targets(targets)
    overhead = otel.overhead_rows(runs)
    otel.print_overhead(overhead)
    report: dict[str, Any] = {
        "benchmark": "load",
        "machine": h.machine_info(),
        "config": _config(options),
        "runs": runs,
        "targets_by_mode": targets,
        "mode_ratios": ratios,
        "baseline": None,
        "side_by_side": [],
        "telemetry_overhead": {
            "rows": overhead,
            "target": otel.evaluate_overhead(overhead) if overhead else None,
        },
    }
    if len(options.sides) > 1:
        baseline = {"python": options.sides[1].python, **(options.sides[1].toolprep or {})}
        rows = side_by_side(runs)
        print_side_by_side(rows, baseline)
        report.update(baseline=baseline, side_by_side=rows)
    return report


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    runs = run_all(options)
    report = report_runs(runs, options)
    h.write_report(options.args.report, report)
    print(f"\nreport: {options.args.report}")
    if options.args.plot is not None and plot(options.args.plot, runs):
        print(f"plot:   {options.args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
