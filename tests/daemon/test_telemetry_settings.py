"""What the ``OTEL_*`` variables turn on: nothing unless configured, never when disabled."""

from __future__ import annotations

import pytest

from toolprep.runtime.telemetry.settings import OTLP_HTTP_PROTOCOL, TelemetrySettings


@pytest.mark.parametrize(
    ("environ", "otlp"),
    [
        ({}, False),  # the SDK's default would export to localhost:4318; this one does not
        ({"OTEL_METRICS_EXPORTER": "otlp"}, True),
        ({"OTEL_METRICS_EXPORTER": "prometheus, otlp"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://collector:4318/v1/metrics"}, True),
        ({"OTEL_METRICS_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
        ({"OTEL_METRICS_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "TRUE"}, False),
    ],
)
def test_otlp_export_only_when_configured_and_not_disabled(
    environ: dict[str, str], otlp: bool
) -> None:
    assert TelemetrySettings.from_environ(environ).otlp_metrics is otlp


def test_disabled_is_read_as_the_sdk_reads_it() -> None:
    assert TelemetrySettings.from_environ({"OTEL_SDK_DISABLED": "true"}).disabled
    assert not TelemetrySettings.from_environ({"OTEL_SDK_DISABLED": "false"}).disabled
    assert not TelemetrySettings.from_environ({}).disabled


def test_the_metrics_protocol_wins_over_the_general_one() -> None:
    environ = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": OTLP_HTTP_PROTOCOL,
    }
    assert TelemetrySettings.from_environ(environ).otlp_protocol == OTLP_HTTP_PROTOCOL
    assert TelemetrySettings.from_environ({}).otlp_protocol == OTLP_HTTP_PROTOCOL
    grpc = TelemetrySettings.from_environ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert grpc.otlp_protocol == "grpc"
