"""The soak's samples over time as a PNG: each series over its value at the end of warm-up.

matplotlib is not a dependency of toolprep: ``pip install matplotlib`` to draw.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from benchmarks.soak_daemon.meter import Sample

__all__ = ["PANELS", "MissingMatplotlib", "plot"]

PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Memory (RSS)", ("front_rss_mib", "oldest_worker_rss_mib", "workers_rss_mib")),
    ("Threads and descriptors", ("front_threads", "workers_threads", "front_fds", "workers_fds")),
    ("Store files", ("db_kib", "wal_kib")),
    ("Daemon gauges", ("sessions_live", "clients_attached", "send_buffer_kib")),
)
"""Each panel's title and series (``Sample`` fields)."""


class MissingMatplotlib(RuntimeError):
    """``--plot`` was asked for where matplotlib is not installed."""


def plot(
    path: Path,
    samples: Sequence[Sample],
    warmup_end: float,
    bases: Mapping[str, float],
    title: str,
) -> None:
    """Two by two panels, 1200 x 800 px. The first three show each series as a ratio to its
    value at the end of warm-up (``bases``: the median the growth ratios start from; 1.0 =
    no growth), the gauges as counts; warm-up is shaded, worker kills are dotted lines."""
    try:
        import matplotlib
    except ImportError as exc:
        raise MissingMatplotlib(
            "--plot needs matplotlib, which toolprep does not depend on: pip install matplotlib"
        ) from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 2, figsize=(12, 8), dpi=100, sharex=True)
    xs = [s.at for s in samples]
    restarts = [s.worker_restarts for s in samples]
    kills = [
        s.at for s, before in zip(samples[1:], restarts, strict=False) if s.worker_restarts > before
    ]
    for n, (axis, (panel, names)) in enumerate(zip(axes.flat, PANELS, strict=True)):
        ratio = n < 3
        for name in names:
            ys = [s.row()[name] for s in samples]
            base = bases.get(name, 0.0) if ratio else 0.0
            if ratio and base:
                ys = [y / base for y in ys]
                label = f"{name} (1.0 = {base:.0f})"
            else:
                label = name
            axis.plot(xs, ys, label=label, linewidth=1.2)
        axis.axvspan(0, warmup_end, color="grey", alpha=0.15, label="warm-up")
        for at in kills:
            axis.axvline(at, color="black", linestyle=":", linewidth=0.8)
        axis.set_title(panel)
        axis.set_ylabel("x value after warm-up" if ratio else "count / KiB")
        axis.grid(True, alpha=0.3)
        axis.legend(loc="upper left", fontsize="small")
    for axis in axes[1]:
        axis.set_xlabel("seconds since the load started")
    figure.suptitle(title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
