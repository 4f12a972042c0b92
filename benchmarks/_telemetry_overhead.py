"""``benchmarks.load --telemetry off,on``: what the runtime's OpenTelemetry costs per event.

Each embedded scenario with a local host runs twice per N, telemetry off (the runtime's
default observer, whose methods return at once) and on (the real SDK pipeline: spans of
every turn, attempt and card, the turn instruments, exported over OTLP/HTTP to a loopback
receiver in the parent, ``support.otlp_sink``). The two runs are interleaved, so both
meet the same machine. The figure judged is the runtime's CPU per provider event: the
child's process CPU (``getrusage``: every thread, the SDK's export threads included) less
the editor-side threads', over the events the provider sent in the window.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = [
    "TARGET_RATIO",
    "evaluate_overhead",
    "overhead_rows",
    "print_overhead",
    "telemetry_environ",
]

TARGET_RATIO: Final = 1.05
"""Telemetry on may cost at most 5 % more runtime CPU per event than off."""

SPAN_DELAY_MS: Final = 5000
"""``OTEL_BSP_SCHEDULE_DELAY``: the SDK's default. Under load the span processor exports
sooner anyway, each time 512 spans are queued."""
METRIC_INTERVAL_MS: Final = 5000
"""``OTEL_METRIC_EXPORT_INTERVAL``: the SDK's default is 60 s, longer than a run's
window, which would then see no periodic export at all. Every 5 s puts at least one in
each window: twelve times the default rate, so an upper bound on that export's share."""

EXPORT_THREADS: Final = "Otel"
"""The SDK names its export threads ``OtelBatchSpanRecordProcessor``,
``OtelPeriodicExportingMetricReader``."""


def telemetry_environ(endpoint: str, trace_sample: float = 1.0) -> dict[str, str]:
    """The ``OTEL_*`` variables the child sets before it starts telemetry; below 1,
    ``trace_sample`` is the share of turns traced (the SDK's ``parentbased_traceidratio``
    sampler: an operator's usual setting under load; metrics are always whole)."""
    sampler = (
        {
            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": str(trace_sample),
        }
        if trace_sample < 1.0
        else {}
    )
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_BSP_SCHEDULE_DELAY": str(SPAN_DELAY_MS),
        "OTEL_METRIC_EXPORT_INTERVAL": str(METRIC_INTERVAL_MS),
        "OTEL_SERVICE_NAME": "toolprep-bench",
        **sampler,
    }


def _export_threads_us(run: dict[str, Any]) -> float | None:
    """CPU of the SDK's export threads per event (included in the run's us/ev)."""
    events: int = run["events"]
    if not events:
        return None
    by_thread: dict[str, float] = run["cpu"]["by_thread_s"]
    seconds = sum(s for name, s in by_thread.items() if name.startswith(EXPORT_THREADS))
    return round(seconds / events * 1e6, 2)


def _ratio(on: float | None, off: float | None) -> float | None:
    return None if not on or not off else round(on / off, 3)


def overhead_rows(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per side, wire, transport and N that ran with telemetry both off and on."""

    def key(run: dict[str, Any]) -> tuple[Any, ...]:
        return (run.get("side"), run["provider"], run["transport"], run["sessions"])

    off = {key(r): r for r in runs if r["agent"] == "embedded" and r["telemetry"] == "off"}
    rows: list[dict[str, Any]] = []
    for on in runs:
        base = off.get(key(on))
        if on["agent"] != "embedded" or on["telemetry"] != "on" or base is None:
            continue
        us_off, us_on = base["cpu"]["per_event_us"], on["cpu"]["per_event_us"]
        rows.append(
            {
                "side": on.get("side"),
                "provider": on["provider"],
                "transport": on["transport"],
                "sessions": on["sessions"],
                "events_per_s": {"off": base["events_per_s"], "on": on["events_per_s"]},
                "per_event_us": {"off": us_off, "on": us_on, "ratio": _ratio(us_on, us_off)},
                "export_threads_us": _export_threads_us(on),
                "preparing_p99_ms": {
                    "off": base["preparing_latency_ms"]["p99"],
                    "on": on["preparing_latency_ms"]["p99"],
                },
                "other_cores": {
                    "off": base["cpu"]["other_processes_cores"],
                    "on": on["cpu"]["other_processes_cores"],
                },
                "otlp_received": on.get("otlp_received"),
                "turns": on["totals"]["turns"],
            }
        )
    return rows


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_overhead(rows: list[dict[str, Any]]) -> None:
    """The side-by-side table, what the receiver got, and the verdict against the target."""
    if not rows:
        return
    print(
        "\ntelemetry off vs on (traces + metrics over OTLP/HTTP to a loopback receiver in the "
        "parent process):"
    )
    header = (
        f"{'wire':<11}{'transport':<11}{'N':>6}{'ev/s off':>10}{'on':>8}"
        f"{'us/ev off':>11}{'on':>8}{'on/off':>8}{'export':>8}"
        f"{'p99 ms off':>12}{'on':>8}{'other':>7}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        us, p99, rate = row["per_event_us"], row["preparing_p99_ms"], row["events_per_s"]
        other = max(row["other_cores"]["off"], row["other_cores"]["on"])
        side = "" if row["side"] in (None, "current") else f" ({row['side']})"
        print(
            f"{row['provider'] + side:<11}{row['transport']:<11}{row['sessions']:>6}"
            f"{rate['off']:>10.0f}{rate['on']:>8.0f}"
            f"{_fmt(us['off'], '.1f'):>11}{_fmt(us['on'], '.1f'):>8}{_fmt(us['ratio'], '.3f'):>8}"
            f"{_fmt(row['export_threads_us'], '.1f'):>8}"
            f"{_fmt(p99['off'], '.2f'):>12}{_fmt(p99['on'], '.2f'):>8}{other:>7.2f}"
        )
    print(
        "us/ev: the child's process CPU (getrusage: every thread, the SDK's export threads "
        "included) less the editor-side threads', per provider event; export: the SDK's export "
        "threads' part of it (on); other: cores other processes used (the larger of the two runs)."
    )
    for row in rows:
        received = row["otlp_received"] or {}
        parts = [
            f"{signal} {c['requests']} requests / {c['bytes'] / 1024:.0f} KiB"
            + ("" if c["items"] is None else f" / {c['items']} {_unit(signal)}")
            for signal, c in received.items()
        ]
        print(
            f"  OTLP received ({row['provider']}, N={row['sessions']}, whole run, "
            f"{row['turns']} turns): {'; '.join(parts) or 'nothing'}"
        )
    verdict = evaluate_overhead(rows)
    print(
        f"\n{verdict['verdict']}  {verdict['target']}: worst ratio {_fmt(verdict['worst'], '.3f')}"
    )


def evaluate_overhead(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """PASS when every pair's ratio is measured and within the target."""
    ratios = [r["per_event_us"]["ratio"] for r in rows]
    worst = max((r for r in ratios if r is not None), default=None)
    ok = worst is not None and None not in ratios and worst <= TARGET_RATIO
    return {
        "target": f"telemetry on costs at most +{TARGET_RATIO - 1:.0%} runtime CPU per event "
        f"(ratio on/off <= {TARGET_RATIO})",
        "worst": worst,
        "verdict": "PASS" if ok else "MISS",
    }


def _unit(signal: str) -> str:
    return "spans" if signal == "traces" else "data points"
