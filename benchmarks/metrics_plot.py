"""A load run's metrics as Prometheus saw them, plotted: the picture in docs/observability.md.

Starts the loopback provider (``benchmarks.support.load_server``), ``toolprep serve`` with
workers against it, and a real Prometheus scraping the daemon's ``/metrics`` every second.
Sessions are added in steps over the first part of the run and prompt in a loop, a share of
their turns cancelled at the first tool card (``benchmarks.metrics_load``); near the end the
prompts stop, so the rates fall back. Then Prometheus's ``query_range`` gives turns/s,
preparing-card latency p50/p99, discarded cards/s and live sessions, plotted into a PNG.

Run: ``python -m benchmarks.metrics_plot [--out docs/images/metrics-load-run.png]
[--duration 60] [--sessions 32]``. Needs matplotlib (not a dependency) and ``prometheus``.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from benchmarks import _harness as h
from benchmarks.metrics_load import CancellingLoad
from benchmarks.serve.daemon import serve_daemon
from benchmarks.serve.ws_client import WsLoadClient
from benchmarks.support.prometheus import PrometheusServer, Series, prometheus_server

__all__ = ["PANELS", "Panel", "main"]

JOB = "toolprep"
RATE_WINDOW = "5s"
"""Five scrapes: short enough to follow the steps, long enough to smooth a 1 s scrape."""
STEPS = 4
DRAIN_TIMEOUT_S = 30.0
SETTLE_S = 3.0
"""Scrapes waited for after the load, so the last seconds are in Prometheus."""


@dataclass(frozen=True)
class Panel:
    """One plot: its title, y label, and the queries (PromQL, legend) drawn in it.

    A legend with ``{label}`` in it is filled from each series' labels; ``scale``
    multiplies the values (seconds to milliseconds)."""

    title: str
    y_label: str
    queries: tuple[tuple[str, str], ...]
    scale: float = 1.0


def _quantile(q: float, metric: str) -> str:
    return (
        f"histogram_quantile({q}, sum by (le) "
        f'(rate({metric}_bucket{{job="{JOB}"}}[{RATE_WINDOW}])))'
    )


PANELS = (
    Panel(
        "Turns/s by stop reason",
        "turns/s",
        (
            (
                f'sum by (stop_reason) (rate(toolprep_turns_total{{job="{JOB}"}}[{RATE_WINDOW}]))',
                "{stop_reason}",
            ),
        ),
    ),
    Panel(
        "Preparing card latency",
        "ms",
        (
            (_quantile(0.5, "toolprep_card_preparing_latency_seconds"), "p50"),
            (_quantile(0.99, "toolprep_card_preparing_latency_seconds"), "p99"),
        ),
        scale=1000.0,
    ),
    Panel(
        "Discarded cards/s by reason",
        "cards/s",
        (
            (
                "sum by (toolprep_discard_reason) "
                f'(rate(toolprep_cards_discarded_total{{job="{JOB}"}}[{RATE_WINDOW}]))',
                "{toolprep_discard_reason}",
            ),
        ),
    ),
    Panel(
        "Live sessions and connections",
        "count",
        (
            (f'sum(toolprep_sessions_live{{job="{JOB}"}})', "live sessions"),
            (f'sum(toolprep_connections_open{{job="{JOB}"}})', "connections"),
        ),
    ),
)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=h.REPO / "docs/images/metrics-load-run.png")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    parser.add_argument("--sessions", type=int, default=32, help="sessions at the peak")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cancel-share", type=float, default=0.2)
    parser.add_argument("--rate", type=float, default=40.0, help="provider events/s per stream")
    return parser.parse_args(argv)


def _sleep_until(deadline: float) -> None:
    time.sleep(max(0.0, deadline - time.monotonic()))


def _run_load(load: CancellingLoad, clients: list[WsLoadClient], args: argparse.Namespace) -> int:
    """Add sessions in ``STEPS`` steps over the first 40 % of the run, stop prompting at 85 %,
    wait out the rest; the turns still running when the drain gave up."""
    start = time.monotonic()
    per_step = max(1, args.sessions // STEPS)
    for step in range(STEPS):
        _sleep_until(start + step * 0.4 * args.duration / STEPS)
        load.add_sessions(clients, per_step)
    _sleep_until(start + 0.85 * args.duration)
    left = load.stop(DRAIN_TIMEOUT_S)
    _sleep_until(start + args.duration)
    return left


Drawn = list[tuple[str, Series]]
"""A panel's series, each with its legend."""


def _fetch(prometheus: PrometheusServer, start: float, end: float) -> list[Drawn]:
    """Each panel's queries over ``start``..``end`` at one point a second."""
    return [
        [
            (legend.format_map(series.labels), series)
            for promql, legend in panel.queries
            for series in prometheus.query_range(promql, start, end, 1.0)
        ]
        for panel in PANELS
    ]


def plot(path: Path, panels: list[Drawn], start: float) -> None:
    """Two by two plots, 1200 x 800 px, time in seconds since the load started."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 2, figsize=(12, 8), dpi=100, sharex=True)
    for axis, panel, drawn in zip(axes.flat, PANELS, panels, strict=True):
        for legend, series in drawn:
            xs = [at - start for at, _ in series.points]
            ys = [v * panel.scale if math.isfinite(v) else math.nan for _, v in series.points]
            axis.plot(xs, ys, label=legend, linewidth=1.4)
        axis.set_title(panel.title)
        axis.set_ylabel(panel.y_label)
        axis.set_ylim(bottom=0)
        axis.grid(True, alpha=0.3)
        if drawn:
            axis.legend(loc="upper left", fontsize="small")
    for axis in axes[1]:
        axis.set_xlabel("seconds since the load started")
    figure.suptitle("toolprep serve under load, as its Prometheus scraped it every second")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    with ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="toolprep-plot-")))
        workdir = scratch / "work"
        workdir.mkdir()
        h.write_bench_file(workdir)
        server = stack.enter_context(h.loopback_server(args.rate, tool="read_file"))
        daemon = stack.enter_context(
            serve_daemon("anthropic", server.base_url, args.workers, scratch / "data", scratch)
        )
        address = urlsplit(daemon.url).netloc
        prometheus = stack.enter_context(
            prometheus_server(scratch / "prometheus", JOB, address, daemon.token)
        )
        load = CancellingLoad(str(workdir), args.cancel_share)
        clients = []
        for n in range(args.connections):
            client = WsLoadClient(daemon.url, daemon.token, load.on_update, name=f"plot-ws-{n}")
            stack.callback(client.close)
            clients.append(client)
        start = time.time()
        left = _run_load(load, clients, args)
        time.sleep(SETTLE_S)
        panels = _fetch(prometheus, start - SETTLE_S, time.time())
    plot(args.out, panels, start)
    counts = load.counts
    print(
        f"turns by stop reason: {counts.stop_reasons}; cancels sent: {counts.cancels_sent}; "
        f"failed prompts: {counts.prompt_errors}; still running at the end: {left}"
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
