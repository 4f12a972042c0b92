"""The OpenTelemetry SDK's pipelines: a ``MeterProvider`` with the readers asked for, and a
``TracerProvider`` exporting spans over OTLP when asked for.

- Prometheus: ``PrometheusMetricReader`` collects into a ``prometheus_client`` registry of
  this process's own (with the client's process collector: CPU, memory, descriptors), which
  ``prometheus_client`` renders for each scrape, in the format the scraper's ``Accept`` asks for.
- OTLP: a ``PeriodicExportingMetricReader`` with the OTLP/HTTP exporter, which reads its
  endpoint, headers, timeout and interval from the ``OTEL_*`` variables itself. It exports
  on its own thread, so a collector that is down or slow never holds back a turn; a failed
  export is the SDK's log line, nothing more.
- Spans: a ``BatchSpanProcessor`` over the OTLP/HTTP span exporter: ended spans wait in a
  bounded queue (dropped, not waited for, when it is full) and leave on the processor's
  thread.

The resource is the SDK's (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``), named
``toolprep`` when neither names the service. Importing this module imports the SDK: only
``setup`` does, once telemetry is on.
"""

from __future__ import annotations

import logging
import os
from typing import Final

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import PROCESS_PID, SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.exposition import choose_encoder

from toolprep import __version__
from toolprep.runtime.telemetry.gathered_metrics import gathered_families
from toolprep.runtime.telemetry.instruments import NO_METRICS
from toolprep.runtime.telemetry.otel_instruments import OtelMetrics
from toolprep.runtime.telemetry.otel_observer import OtelObserver
from toolprep.runtime.telemetry.settings import OTLP_HTTP_PROTOCOL, TelemetrySettings
from toolprep.runtime.telemetry.setup import (
    PROCESS_ROLE,
    Exposition,
    MetricsPage,
    ProcessRole,
    Telemetry,
    Unavailable,
    WorkerReadings,
)

__all__ = ["SHUTDOWN_BUDGET_S", "start_sdk"]

logger = logging.getLogger(__name__)

SHUTDOWN_BUDGET_S: Final = 3.0
"""How long stopping waits for the last export; a collector that is down costs no more."""

_DEFAULT_OTLP_METRICS_ENDPOINT: Final = "http://localhost:4318/v1/metrics"


def start_sdk(
    settings: TelemetrySettings,
    *,
    prometheus: bool,
    count_turns: bool = False,
    role: ProcessRole = "agent",
) -> Telemetry:
    resource = _resource(role)
    tracer_provider = _tracer_provider(settings, resource)
    readers: list[MetricReader] = []
    registry: CollectorRegistry | None = None
    if prometheus:
        registry = CollectorRegistry()
        ProcessCollector(registry=registry)
        readers.append(PrometheusMetricReader(registry=registry))
    if settings.otlp_metrics:
        if settings.otlp_protocol == OTLP_HTTP_PROTOCOL:
            readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
            logger.info(
                "telemetry: exporting metrics over OTLP (%s) to %s",
                OTLP_HTTP_PROTOCOL,
                _otlp_metrics_endpoint(),
            )
        else:
            logger.warning(
                "telemetry: OTLP protocol %r is not supported, only %s: metrics are not "
                "exported over OTLP (set OTEL_EXPORTER_OTLP_PROTOCOL=%s)",
                settings.otlp_protocol,
                OTLP_HTTP_PROTOCOL,
                OTLP_HTTP_PROTOCOL,
            )
    if not readers and tracer_provider is None:
        return Telemetry.off("telemetry is not configured")
    provider = MeterProvider(resource=resource, metric_readers=readers) if readers else None
    meter = provider.get_meter("toolprep", __version__) if provider is not None else None
    tracer = (
        tracer_provider.get_tracer("toolprep", __version__) if tracer_provider is not None else None
    )
    metrics = OtelMetrics(meter) if meter is not None else NO_METRICS
    observer = OtelObserver(tracer, meter, count_turns=count_turns)

    def page(accept: str, workers: WorkerReadings | None) -> MetricsPage:
        if registry is None:
            return Unavailable("metrics are exported over OTLP only")
        encoder, content_type = choose_encoder(accept)
        families = gathered_families(registry, workers)
        return Exposition(encoder(families), content_type)

    def shutdown() -> None:
        try:
            if tracer_provider is not None:
                tracer_provider.force_flush(timeout_millis=int(SHUTDOWN_BUDGET_S * 1000))
                tracer_provider.shutdown()
            if provider is not None:
                provider.shutdown(timeout_millis=SHUTDOWN_BUDGET_S * 1000)
        except Exception:  # telemetry never fails the process's exit
            logger.exception("telemetry: stopping the exporters failed")

    return Telemetry(metrics, page, shutdown, observer)


def _tracer_provider(settings: TelemetrySettings, resource: Resource) -> TracerProvider | None:
    if not settings.otlp_traces:
        return None
    if settings.otlp_protocol != OTLP_HTTP_PROTOCOL:
        logger.warning(
            "telemetry: OTLP protocol %r is not supported, only %s: spans are not exported",
            settings.otlp_protocol,
            OTLP_HTTP_PROTOCOL,
        )
        return None
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    logger.info("telemetry: exporting spans over OTLP (%s)", OTLP_HTTP_PROTOCOL)
    return provider


def _resource(role: ProcessRole) -> Resource:
    """The SDK's resource (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``) plus which
    process this is: the daemon, one of its workers or shards, or an editor's agent."""
    detected = Resource.create(
        {SERVICE_VERSION: __version__, PROCESS_PID: os.getpid(), PROCESS_ROLE: role}
    )
    if str(detected.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        detected = detected.merge(Resource({SERVICE_NAME: "toolprep"}))
    return detected


def _otlp_metrics_endpoint() -> str:
    """Where the exporter sends, as it works it out (for the start-up line)."""
    specific = os.environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
    if specific:
        return specific
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return base.rstrip("/") + "/v1/metrics" if base else _DEFAULT_OTLP_METRICS_ENDPOINT
