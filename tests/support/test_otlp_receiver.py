"""The OTLP receiver decodes what the real OpenTelemetry exporters send.

Each test drives the real SDK and OTLP/HTTP exporters at a live receiver, so a
change in the wire format (or in the receiver's decoding) shows up here rather
than as a telemetry test that silently sees nothing.
"""

from __future__ import annotations

import gzip
import http.client
from collections.abc import Iterator

import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, StatusCode

from tests.support.otlp_receiver import OtlpReceiver, ReceivedPoint, ReceivedSpan

RESOURCE = Resource.create({"service.name": "otlp-receiver-test"})


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as receiver:
        yield receiver


def _hex_span_id(value: int) -> str:
    return f"{value:016x}"


def test_spans_arrive_with_parent_ids_attributes_and_events(receiver: OtlpReceiver) -> None:
    exporter = OTLPSpanExporter(
        endpoint=receiver.endpoint + "/v1/traces", compression=Compression.Gzip
    )
    provider = TracerProvider(resource=RESOURCE, shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("receiver-test-scope")
    try:
        with (
            tracer.start_as_current_span("parent", kind=SpanKind.SERVER) as parent,
            tracer.start_as_current_span(
                "child",
                kind=SpanKind.CLIENT,
                attributes={"tool": "grep", "attempt": 2, "ok": True, "ratio": 0.5},
            ) as child,
        ):
            child.set_attribute("paths", ["a.py", "b.py"])
            child.add_event("retried", {"reason": "timeout", "delay_ms": 250})
            child.set_status(StatusCode.ERROR, "tool failed")
    finally:
        provider.shutdown()

    spans = receiver.wait_for_spans(lambda spans: len(spans) >= 2)
    by_name = {span.name: span for span in spans}
    assert sorted(by_name) == ["child", "parent"]
    received_parent, received_child = by_name["parent"], by_name["child"]

    parent_context = parent.get_span_context()
    child_context = child.get_span_context()
    assert received_parent.trace_id == f"{parent_context.trace_id:032x}"
    assert received_child.trace_id == received_parent.trace_id
    assert received_parent.span_id == _hex_span_id(parent_context.span_id)
    assert received_child.span_id == _hex_span_id(child_context.span_id)
    assert received_parent.parent_span_id == ""
    assert received_child.parent_span_id == received_parent.span_id

    assert received_parent.kind == Span.SpanKind.SPAN_KIND_SERVER
    assert received_child.kind == Span.SpanKind.SPAN_KIND_CLIENT
    assert received_child.attributes == {
        "tool": "grep",
        "attempt": 2,
        "ok": True,
        "ratio": 0.5,
        "paths": ("a.py", "b.py"),
    }
    assert len(received_child.events) == 1
    event = received_child.events[0]
    assert event.name == "retried"
    assert event.attributes == {"reason": "timeout", "delay_ms": 250}
    assert received_child.start_ns <= event.time_ns <= received_child.end_ns
    assert received_child.status_code == Status.StatusCode.STATUS_CODE_ERROR
    assert received_child.status_message == "tool failed"
    assert received_parent.status_code == Status.StatusCode.STATUS_CODE_UNSET
    assert received_parent.start_ns <= received_child.start_ns
    assert received_child.end_ns <= received_parent.end_ns
    assert received_child.scope == "receiver-test-scope"
    assert received_child.resource["service.name"] == "otlp-receiver-test"
    assert receiver.requests == 2  # SimpleSpanProcessor: one export per span


def test_counter_and_histogram_points_arrive(
    receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The base endpoint is what OTEL_EXPORTER_OTLP_ENDPOINT takes: the exporter
    # appends /v1/metrics itself.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    reader = PeriodicExportingMetricReader(OTLPMetricExporter(), export_interval_millis=3_600_000)
    provider = MeterProvider(metric_readers=[reader], resource=RESOURCE, shutdown_on_exit=False)
    meter = provider.get_meter("receiver-test-meter")
    try:
        calls = meter.create_counter("tool.calls", unit="{call}")
        calls.add(2, {"tool": "grep"})
        calls.add(3, {"tool": "grep"})
        latency = meter.create_histogram("tool.latency", unit="ms")
        for value in (10.0, 20.0, 60.0):
            latency.record(value, {"tool": "grep"})
        assert provider.force_flush()
    finally:
        provider.shutdown()

    def both(points: list[ReceivedPoint]) -> bool:
        return {point.metric for point in points} >= {"tool.calls", "tool.latency"}

    points = receiver.wait_for_points(both)
    counter = next(point for point in points if point.metric == "tool.calls")
    histogram = next(point for point in points if point.metric == "tool.latency")
    assert counter.kind == "sum"
    assert counter.unit == "{call}"
    assert counter.value == 5.0
    assert counter.attributes == {"tool": "grep"}
    assert (counter.count, counter.sum) == (None, None)
    assert counter.resource["service.name"] == "otlp-receiver-test"
    assert histogram.kind == "histogram"
    assert histogram.unit == "ms"
    assert histogram.count == 3
    assert histogram.sum == 90.0
    assert histogram.value is None
    assert histogram.attributes == {"tool": "grep"}


# Exporters are typed as the SDK's SpanExporter where shutdown() is called: the
# OTLP exporter's own shutdown() is unannotated, which mypy --strict refuses.


def _one_finished_span() -> ReadableSpan:
    provider = TracerProvider(resource=RESOURCE, shutdown_on_exit=False)
    with provider.get_tracer("receiver-test-scope").start_as_current_span("refused") as span:
        pass
    assert isinstance(span, ReadableSpan)
    return span


@pytest.mark.parametrize("status", [400, 503])
def test_a_refusing_receiver_fails_the_export(receiver: OtlpReceiver, status: int) -> None:
    # 503 is retried with a backoff of at least 0.8 s; a 0.5 s timeout leaves no
    # room for a retry, so the export fails after the one request either way.
    exporter: SpanExporter = OTLPSpanExporter(
        endpoint=receiver.endpoint + "/v1/traces", timeout=0.5
    )
    span = _one_finished_span()
    try:
        receiver.fail_with = status
        assert receiver.status == status
        assert exporter.export([span]) is SpanExportResult.FAILURE
        assert receiver.requests == 1
        assert receiver.spans() == []

        receiver.fail_with = None
        assert receiver.status == 200
        assert exporter.export([span]) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    assert [received.name for received in receiver.spans()] == ["refused"]
    assert receiver.requests == 2


def test_a_wait_that_never_holds_names_what_arrived(receiver: OtlpReceiver) -> None:
    exporter: SpanExporter = OTLPSpanExporter(endpoint=receiver.endpoint + "/v1/traces")
    try:
        assert exporter.export([_one_finished_span()]) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()

    def has_missing(spans: list[ReceivedSpan]) -> bool:
        return any(span.name == "missing" for span in spans)

    with pytest.raises(AssertionError, match=r"spans received: \['refused'\]"):
        receiver.wait_for_spans(has_missing, timeout=0.05)
    with pytest.raises(AssertionError, match=r"points received: \[\]"):
        receiver.wait_for_points(bool, timeout=0.0)


def _request(
    receiver: OtlpReceiver, method: str, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, bytes]:
    host_port = receiver.endpoint.removeprefix("http://")
    connection = http.client.HTTPConnection(host_port, timeout=10)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_other_paths_types_and_bodies_are_refused(receiver: OtlpReceiver) -> None:
    protobuf = {"Content-Type": "application/x-protobuf"}
    assert _request(receiver, "POST", "/v1/logs", b"", protobuf)[0] == 404
    assert _request(receiver, "GET", "/v1/traces", b"", {})[0] == 404
    assert _request(receiver, "POST", "/v1/traces", b"{}", {"Content-Type": "text/json"})[0] == 400
    assert _request(receiver, "POST", "/v1/traces", b"\xff\xff", protobuf)[0] == 400
    not_gzip = {**protobuf, "Content-Encoding": "gzip"}
    assert _request(receiver, "POST", "/v1/metrics", b"plain", not_gzip)[0] == 400
    assert receiver.requests == 5
    assert receiver.spans() == [] and receiver.points() == []

    # An empty export is valid: 200 with an empty (zero-byte) response message.
    empty_gzip = gzip.compress(b"")
    assert _request(receiver, "POST", "/v1/traces", empty_gzip, not_gzip) == (200, b"")
