"""The tables, the targets and their verdicts, from the runs' reports."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchmarks.store import TARGET_LOAD_MS

__all__ = [
    "SATURATED_SHARE",
    "TARGET_CONNECTIONS",
    "TARGET_CPU_RATIO",
    "TARGET_SESSIONS",
    "evaluate",
    "print_details",
    "print_table",
    "print_verdicts",
    "sqlite_cost",
]

TARGET_CPU_RATIO = (0.8, 1.2)
"""Serve's CPU per provider event over stdio's, same run: within +-20 %."""
TARGET_SESSIONS = 1000
TARGET_CONNECTIONS = 100
SATURATED_SHARE = 0.95
"""Below this share of the offered events delivered, the machine could not keep up."""


def _fmt(value: Any, spec: str = "") -> str:
    return "-" if value is None else format(value, spec)


def _share(run: dict[str, Any]) -> float:
    offered = run["offered_events_per_s"] or 0
    return run["events_per_s"] / offered if offered else 0.0


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def print_table(runs: Sequence[dict[str, Any]]) -> None:
    header = (
        f"{'run':<14}{'N':>6}{'conns':>6}{'events/s':>10}{'offered':>9}{'share':>7}"
        f"{'frames/s':>10}{'turns/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'preps':>7}"
        f"{'procs':>6}{'thr':>6}{'KiB/s':>7}{'us/ev':>7}{'us/turn':>9}{'cores':>7}"
        f"{'client':>7}{'prov':>6}{'other':>7}"
    )
    print(header)
    print("-" * len(header))
    for r in runs:
        lat, cpu = r["preparing_latency_ms"], r["cpu"]
        print(
            f"{r['label']:<14}{r['sessions']:>6}{_fmt(r['connections']):>6}"
            f"{r['events_per_s']:>10.0f}{r['offered_events_per_s']:>9.0f}{_share(r):>7.1%}"
            f"{r['frames_per_s']:>10.0f}{r['turns_per_s']:>9.1f}"
            f"{_fmt(lat['p50'], '.2f'):>9}{_fmt(lat['p99'], '.2f'):>9}{_fmt(lat['max'], '.1f'):>9}"
            f"{lat['count']:>7}{r['processes']:>6}{r['threads']['peak']:>6}"
            f"{r['rss_kib']['per_idle_session']:>7.1f}{_fmt(cpu['per_event_us'], '.1f'):>7}"
            f"{_fmt(cpu['per_turn_us'], '.0f'):>9}{cpu['runtime_cores']:>7.2f}"
            f"{cpu['client_cores']:>7.2f}{cpu['loopback_server_cores']:>6.2f}"
            f"{cpu.get('other_processes_cores', 0.0):>7.2f}"
        )


def print_details(runs: Sequence[dict[str, Any]], long_load: dict[str, Any]) -> None:
    for r in runs:
        print(
            f"  {r['label']}: prompt errors {r['prompt_errors']}, failed tool cards "
            f"{r['failed_tool_calls']}, unfinished turns {r['unfinished_turns_at_exit']}, "
            f"stop reasons {r['stop_reasons']}"
            + (
                f", connections closed by the daemon {r['connections_closed_by_daemon']}, "
                f"daemon stderr warnings/errors {r['daemon_stderr_trouble_lines']}, "
                f"in-flight turns drained in {r['drain_s']} s"
                if r["agent"] == "serve"
                else ""
            )
        )
        if r.get("prompt_error_samples"):
            print(f"    first prompt errors: {r['prompt_error_samples'][:3]}")
        if r.get("daemon_stderr_trouble_sample"):
            for line in r["daemon_stderr_trouble_sample"][:5]:
                print(f"    daemon: {line[:200]}")
    for r in runs:
        if r["agent"] != "serve":
            continue
        rss, rc = r["rss_kib"], r["reconnect"]
        print(
            f"  {r['label']}: RSS {rss['after_sessions'] / 1024:.0f} MiB idle with sessions, "
            f"{rss['window_start'] / 1024:.0f} -> {rss['window_end'] / 1024:.0f} MiB over the "
            f"window ({_fmt(rss['window_growth_per_frame_bytes'])} B per frame sent; front "
            f"{rss['window_start_by_process']['front'] / 1024:.0f} -> "
            f"{rss['window_end_by_process']['front'] / 1024:.0f} MiB), "
            f"peak {rss['peak_under_load'] / 1024:.0f} MiB; threads {r['threads']}"
        )
        print(
            f"  {r['label']}: reconnect ({rc['count']} sessions, {rc['frames']['min']}-"
            f"{rc['frames']['max']} frames replayed): connect -> first frame p50 "
            f"{_fmt(rc['first_frame_ms']['p50'], '.1f')} / max "
            f"{_fmt(rc['first_frame_ms']['max'], '.1f')} ms, -> load reply p50 "
            f"{_fmt(rc['reply_ms']['p50'], '.1f')} / max {_fmt(rc['reply_ms']['max'], '.1f')} ms"
        )
    cold, warm = long_load["cold"], long_load["warm"]
    print(
        f"  load of a {long_load['turns']}-turn session ({long_load['frames_expected']} frames, "
        f"store {sum(long_load['database_files'].values()) / 1024:.0f} KiB, "
        f"Sessions.load alone {long_load['store_load_ms']:.1f} ms): cold (from the store) "
        f"{cold['reply_ms']:.1f} ms (first frame {_fmt(cold['first_frame_ms'], '.1f')} ms; "
        f"daemon CPU {cold['daemon_cpu_ms']:.0f} ms, client reader CPU "
        f"{cold['client_reader_cpu_ms']:.0f} ms), warm (live) p50 "
        f"{_fmt(warm['reply_ms_p50'], '.1f')} / max {_fmt(warm['reply_ms_max'], '.1f')} ms "
        f"over {warm['count']}; loads with frames missing: "
        f"{long_load['loads_with_missing_frames']}"
    )


def sqlite_cost(plain: dict[str, Any], persisted: dict[str, Any]) -> dict[str, Any]:
    """The persisted run's CPU per turn over the unpersisted one's: what journaling costs."""
    a, b = plain["cpu"]["per_turn_us"], persisted["cpu"]["per_turn_us"]
    database = persisted["database"] or {}
    return {
        "cpu_per_turn_us_unpersisted": a,
        "cpu_per_turn_us_persisted": b,
        "write_cost_per_turn_us": round(b - a, 1) if a is not None and b is not None else None,
        "cpu_per_event_us_unpersisted": plain["cpu"]["per_event_us"],
        "cpu_per_event_us_persisted": persisted["cpu"]["per_event_us"],
        "turns_per_s_unpersisted": plain["turns_per_s"],
        "turns_per_s_persisted": persisted["turns_per_s"],
        "database_kib_per_turn": database.get("kib_per_turn"),
        "database_bytes": database.get("bytes"),
        "database_turns": database.get("turns"),
        "database_files": database.get("files"),
    }


def evaluate(
    stdio: dict[str, Any],
    serve: dict[str, Any],
    persisted: dict[str, Any],
    long_load: dict[str, Any],
) -> dict[str, Any]:
    """PASS/MISS per target; the CPU target names 1000 sessions over 100 connections."""
    low, high = TARGET_CPU_RATIO
    ratio = _ratio(serve["cpu"]["per_event_us"], stdio["cpu"]["per_event_us"])
    ratio_db = _ratio(persisted["cpu"]["per_event_us"], stdio["cpu"]["per_event_us"])
    at_target = serve["sessions"] == TARGET_SESSIONS and serve["connections"] == TARGET_CONNECTIONS
    cold = long_load["cold"]["reply_ms"]
    warm = long_load["warm"]["reply_ms_max"]
    complete = long_load["loads_with_missing_frames"] == 0
    saturated = {
        r["label"]: round(_share(r), 3)
        for r in (stdio, serve, persisted)
        if _share(r) < SATURATED_SHARE
    }
    return {
        "cpu_per_event": {
            "target": f"serve CPU/event over stdio CPU/event within {low}-{high} "
            f"({TARGET_SESSIONS} sessions over {TARGET_CONNECTIONS} connections)",
            "ratio": ratio,
            "ratio_persisted": ratio_db,
            "measured_at": f"{serve['sessions']} sessions over {serve['connections']} connections",
            "at_target_scale": at_target,
            "verdict": _verdict(ratio is not None and low <= ratio <= high),
        },
        "long_session_load": {
            "target": f"session/load of a {long_load['turns']}-turn session < "
            f"{TARGET_LOAD_MS:.0f} ms",
            "cold_ms": cold,
            "warm_max_ms": warm,
            "ratio_cold": _ratio(cold, TARGET_LOAD_MS),
            "ratio_warm": _ratio(warm, TARGET_LOAD_MS),
            "verdict": _verdict(
                complete and cold < TARGET_LOAD_MS and warm is not None and warm < TARGET_LOAD_MS
            ),
        },
        "saturated_runs": saturated,
    }


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def print_verdicts(targets: dict[str, Any], cost: dict[str, Any]) -> None:
    print(
        f"SQLite write cost per turn: {_fmt(cost['write_cost_per_turn_us'], '.0f')} us "
        f"(CPU per turn {_fmt(cost['cpu_per_turn_us_persisted'], '.0f')} persisted at "
        f"{cost['turns_per_s_persisted']:.1f} turns/s - "
        f"{_fmt(cost['cpu_per_turn_us_unpersisted'], '.0f')} unpersisted at "
        f"{cost['turns_per_s_unpersisted']:.1f} turns/s; CPU per event "
        f"{_fmt(cost['cpu_per_event_us_persisted'], '.1f')} vs "
        f"{_fmt(cost['cpu_per_event_us_unpersisted'], '.1f')} us); database "
        f"{_fmt(cost['database_kib_per_turn'], '.2f')} KiB per turn "
        f"({_fmt(cost['database_turns'])} turns; files {cost['database_files']})"
    )
    cpu, lo = targets["cpu_per_event"], targets["long_session_load"]
    scale = "" if cpu["at_target_scale"] else f" [measured at {cpu['measured_at']}]"
    print(
        f"{cpu['verdict']}  {cpu['target']}: ratio {_fmt(cpu['ratio'], '.2f')} "
        f"(persisted: {_fmt(cpu['ratio_persisted'], '.2f')}){scale}"
    )
    print(
        f"{lo['verdict']}  {lo['target']}: cold {lo['cold_ms']:.1f} ms "
        f"({_fmt(lo['ratio_cold'], '.2f')} of the target), warm max "
        f"{_fmt(lo['warm_max_ms'], '.1f')} ms ({_fmt(lo['ratio_warm'], '.2f')})"
    )
    for label, share in targets["saturated_runs"].items():
        print(
            f"SATURATED  {label}: {share:.1%} of the offered events delivered "
            f"(< {SATURATED_SHARE:.0%}): the machine could not keep up; its figures are "
            f"those of a saturated run"
        )
