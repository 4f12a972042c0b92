"""The OpenTelemetry SDK's metric pipeline: a ``MeterProvider`` with the readers asked for.

- Prometheus: ``PrometheusMetricReader`` collects into a ``prometheus_client`` registry of
  this process's own (with the client's process collector: CPU, memory, descriptors), which
  ``prometheus_client`` renders for each scrape, in the format the scraper's ``Accept`` asks for.
- OTLP: a ``PeriodicExportingMetricReader`` with the OTLP/HTTP exporter, which reads its
  endpoint, headers, timeout and interval from the ``OTEL_*`` variables itself. It exports
  on its own thread, so a collector that is down or slow never holds back a turn; a failed
  export is the SDK's log line, nothing more.

The resource is the SDK's (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``), named
``toolprep`` when neither names the service. Importing this module imports the SDK: only
``setup`` does, once telemetry is on.
"""

from __future__ import annotations

import logging
import os
from typing import Final

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.exposition import choose_encoder

from toolprep import __version__
from toolprep.runtime.telemetry.otel_instruments import OtelMetrics
from toolprep.runtime.telemetry.settings import OTLP_HTTP_PROTOCOL, TelemetrySettings
from toolprep.runtime.telemetry.setup import Exposition, MetricsPage, Telemetry, Unavailable

__all__ = ["SHUTDOWN_BUDGET_S", "start_sdk"]

logger = logging.getLogger(__name__)

SHUTDOWN_BUDGET_S: Final = 3.0
"""How long stopping waits for the last export; a collector that is down costs no more."""

_DEFAULT_OTLP_METRICS_ENDPOINT: Final = "http://localhost:4318/v1/metrics"


def start_sdk(settings: TelemetrySettings, *, prometheus: bool) -> Telemetry:
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
    if not readers:
        return Telemetry.off("telemetry is not configured")
    provider = MeterProvider(resource=_resource(), metric_readers=readers)
    metrics = OtelMetrics(provider.get_meter("toolprep", __version__))

    def page(accept: str) -> MetricsPage:
        if registry is None:
            return Unavailable("metrics are exported over OTLP only")
        encoder, content_type = choose_encoder(accept)
        return Exposition(encoder(registry), content_type)

    def shutdown() -> None:
        try:
            provider.shutdown(timeout_millis=SHUTDOWN_BUDGET_S * 1000)
        except Exception:  # telemetry never fails the process's exit
            logger.exception("telemetry: stopping the metric readers failed")

    return Telemetry(metrics, page, shutdown)


def _resource() -> Resource:
    detected = Resource.create({SERVICE_VERSION: __version__})
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
