"""What telemetry to run, read from the standard ``OTEL_*`` variables.

The variables are the ones every OpenTelemetry SDK reads, so an operator configures this
process as any other: ``OTEL_SDK_DISABLED``, ``OTEL_METRICS_EXPORTER``,
``OTEL_TRACES_EXPORTER``, ``OTEL_EXPORTER_OTLP_ENDPOINT`` (and ``_METRICS_ENDPOINT``,
``_TRACES_ENDPOINT``), ``OTEL_EXPORTER_OTLP_PROTOCOL`` (and ``_METRICS_PROTOCOL``). Only
the choice of what to start is made here; the SDK reads the rest itself (endpoint,
headers, timeout, export interval, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``).

Off unless configured: metrics (spans) go out over OTLP only when ``OTEL_METRICS_EXPORTER``
(``OTEL_TRACES_EXPORTER``) names ``otlp``, or when it is unset and an OTLP endpoint is.
(The SDK's own default would export to ``localhost:4318`` whenever it is installed; a
runtime on a developer's laptop must not start sending because a package is present.)
``toolprep serve``'s ``/metrics`` is always served, so there the Prometheus reader runs
whenever the SDK is not disabled.

Standard library only: reading the settings must not import OpenTelemetry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["OTLP_HTTP_PROTOCOL", "TelemetrySettings"]

OTLP_HTTP_PROTOCOL: Final = "http/protobuf"
"""The one OTLP protocol this package exports with (the ``telemetry`` extra's exporter)."""

_TRUE: Final = frozenset({"true", "1", "yes", "on"})


@dataclass(frozen=True, slots=True)
class TelemetrySettings:
    """``disabled``: ``OTEL_SDK_DISABLED`` is true, so nothing of OpenTelemetry runs.
    ``otlp_metrics``: metrics are exported over OTLP. ``otlp_protocol``: the protocol asked
    for (only ``http/protobuf`` is served; another is refused with a warning at start)."""

    disabled: bool
    otlp_metrics: bool
    otlp_protocol: str
    otlp_traces: bool = False
    """Spans are exported over OTLP (``OTEL_TRACES_EXPORTER``, or an OTLP endpoint)."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> TelemetrySettings:
        disabled = environ.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE
        exporters = _names(environ.get("OTEL_METRICS_EXPORTER", ""))
        endpoint = environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") or environ.get(
            "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        otlp = "otlp" in exporters if exporters else bool(endpoint)
        protocol = (
            environ.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
            or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
            or OTLP_HTTP_PROTOCOL
        ).strip()
        traces = _names(environ.get("OTEL_TRACES_EXPORTER", ""))
        traces_endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
            "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        otlp_traces = "otlp" in traces if traces else bool(traces_endpoint)
        return cls(
            disabled=disabled,
            otlp_metrics=otlp and not disabled,
            otlp_protocol=protocol,
            otlp_traces=otlp_traces and not disabled,
        )


def _names(value: str) -> frozenset[str]:
    """``OTEL_METRICS_EXPORTER``'s comma-separated exporters (``none`` names no exporter)."""
    return frozenset(n.strip().lower() for n in value.split(",") if n.strip())
