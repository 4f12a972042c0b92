"""Start the process's telemetry from its settings: OpenTelemetry when configured, else nothing.

``start_telemetry`` is the one place that decides; the rest of the process holds the
``Telemetry`` it returns: its ``metrics`` facade (``NO_METRICS`` when off), the page
``/metrics`` serves, and ``shutdown``. Nothing of OpenTelemetry is imported unless
telemetry is on and the ``telemetry`` extra is installed (``sdk_pipeline`` is imported
here, inside the function, only then).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from toolprep.runtime.kernel.observer import NO_OBSERVER, TurnObserver
from toolprep.runtime.telemetry.instruments import NO_METRICS, Metrics
from toolprep.runtime.telemetry.settings import TelemetrySettings

__all__ = [
    "INSTALL_HINT",
    "PROCESS_ROLE",
    "WORKER_METRICS_VARIABLE",
    "Exposition",
    "MetricsPage",
    "ProcessRole",
    "Telemetry",
    "Unavailable",
    "WorkerReadings",
    "process_metrics_text",
    "start_telemetry",
    "telemetry_from_environ",
]

logger = logging.getLogger(__name__)

INSTALL_HINT: Final = "install the telemetry extra: pip install 'toolprep[telemetry]'"

PROCESS_ROLE: Final = "toolprep.process.role"
"""The resource attribute that says which process exported: ``ProcessRole``."""

ProcessRole = Literal["agent", "daemon", "worker"]
"""``agent``: ``toolprep acp`` (or an embedding); ``daemon``: ``toolprep serve``'s front;
``worker``: one of its worker processes or Ray shards."""

WORKER_METRICS_VARIABLE: Final = "TOOLPREP_WORKER_METRICS"
"""Set to ``1`` by a front that serves ``/metrics`` in its workers' environment: each then
records metrics for the front to read (``ReadMetrics``), whether or not OTLP is on."""


@dataclass(frozen=True, slots=True)
class Exposition:
    """A rendered scrape: the body in the format ``content_type`` names."""

    body: bytes
    content_type: str


@dataclass(frozen=True, slots=True)
class Unavailable:
    """No metrics to serve, and why (what ``/metrics`` answers with a 503)."""

    reason: str


MetricsPage = Exposition | Unavailable
"""What a scrape gets."""

WorkerReadings = Callable[[], Sequence[tuple[int, str]]]
"""Each live worker's slot and its metrics in the Prometheus text format, read at scrape
time (``WorkerHost.read_worker_metrics``)."""

PageRenderer = Callable[[str, WorkerReadings | None], MetricsPage]


class Telemetry:
    """What ``start_telemetry`` started: ``metrics`` for the hosting's own readings,
    ``observer`` for a runtime's turns (``Runtime(observer=...)``). ``page(accept)`` renders
    the metrics for a scrape whose ``Accept`` header is ``accept``; ``shutdown`` flushes and
    stops the exporters within a bounded time."""

    def __init__(
        self,
        metrics: Metrics,
        page: PageRenderer,
        shutdown: Callable[[], None],
        observer: TurnObserver = NO_OBSERVER,
    ) -> None:
        self.metrics = metrics
        self.observer = observer
        self._page = page
        self._shutdown = shutdown
        self._workers: WorkerReadings | None = None

    @classmethod
    def off(cls, reason: str) -> Telemetry:
        """Nothing recorded; ``/metrics`` says ``reason``."""
        unavailable = Unavailable(reason)
        return cls(NO_METRICS, lambda _accept, _workers: unavailable, lambda: None)

    @property
    def on(self) -> bool:
        return self.metrics is not NO_METRICS or self.observer is not NO_OBSERVER

    def gather_workers(self, readings: WorkerReadings) -> None:
        """Serve the workers' metrics with this process's (``gathered_metrics``)."""
        self._workers = readings

    def page(self, accept: str = "") -> MetricsPage:
        return self._page(accept, self._workers)

    def shutdown(self) -> None:
        self._shutdown()


def start_telemetry(
    settings: TelemetrySettings,
    *,
    prometheus: bool,
    count_turns: bool = False,
    role: ProcessRole = "agent",
) -> Telemetry:
    """The process's telemetry. ``prometheus``: a ``/metrics`` page is served (``serve``),
    or read by the process that serves it (a worker), so metrics are recorded whenever
    OpenTelemetry is not disabled and installed. ``count_turns``: the runtime's observer
    counts turns (no session pool does: ``toolprep acp``)."""
    if settings.disabled:
        return Telemetry.off(
            "telemetry is disabled (OTEL_SDK_DISABLED=true): no metrics are recorded; "
            "unset it to serve them"
        )
    if not prometheus and not settings.otlp_metrics and not settings.otlp_traces:
        return Telemetry.off("telemetry is not configured")
    try:
        from toolprep.runtime.telemetry.sdk_pipeline import start_sdk
    except ImportError as exc:
        reason = f"metrics are not recorded: {INSTALL_HINT} ({exc})"
        if settings.otlp_metrics or settings.otlp_traces:
            logger.warning("OTLP export was asked for, but %s", reason)
        return Telemetry.off(reason)
    try:
        return start_sdk(settings, prometheus=prometheus, count_turns=count_turns, role=role)
    except Exception as exc:  # telemetry never keeps the process from serving
        logger.exception("telemetry could not start; going on without it")
        return Telemetry.off(f"telemetry could not start: {exc}")


_process_telemetry: Telemetry | None = None


def telemetry_from_environ(
    *, prometheus: bool, count_turns: bool = False, role: ProcessRole = "agent"
) -> Telemetry:
    """``start_telemetry`` as this process's ``OTEL_*`` variables configure it: the
    process's telemetry, which ``process_metrics_text`` reads."""
    global _process_telemetry
    telemetry = start_telemetry(
        TelemetrySettings.from_environ(os.environ),
        prometheus=prometheus,
        count_turns=count_turns,
        role=role,
    )
    _process_telemetry = telemetry
    return telemetry


def process_metrics_text() -> str:
    """This process's metrics in the Prometheus text format; empty if it records none."""
    telemetry = _process_telemetry
    page = telemetry.page("") if telemetry is not None else None
    return page.body.decode() if isinstance(page, Exposition) else ""
