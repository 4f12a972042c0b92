"""A loopback OTLP/HTTP collector for tests: what the real exporters send, decoded.

A test of telemetry should see what a collector would see, not what a mock of
the SDK was called with: the real ``OTLPSpanExporter`` / ``OTLPMetricExporter``
encode, compress and POST over a real socket, and this receiver decodes that
wire format with the ``opentelemetry-proto`` messages. What it received is kept
as plain frozen dataclasses (hex ids, Python attribute values) so assertions
read like the data, with no protobuf in the tests.

Point an exporter at ``receiver.endpoint`` (for ``OTEL_EXPORTER_OTLP_ENDPOINT``:
the exporters append ``/v1/traces`` and ``/v1/metrics``) or at
``receiver.endpoint + "/v1/traces"`` for an exporter's ``endpoint=``. Wait with
``wait_for_spans`` / ``wait_for_points``, which block on a condition the
handler notifies, never on a fixed sleep. Setting ``status`` (or ``fail_with``)
to an error code makes it a collector that refuses, to test the exporter's side.
"""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Literal, Self, TypeVar

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import NumberDataPoint
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

__all__ = [
    "DEFAULT_WAIT_S",
    "OtlpReceiver",
    "ReceivedEvent",
    "ReceivedPoint",
    "ReceivedSpan",
]

T = TypeVar("T")

DEFAULT_WAIT_S = 10.0
TRACES_PATH = "/v1/traces"
METRICS_PATH = "/v1/metrics"
PROTOBUF = "application/x-protobuf"
# A stalled client must not hold a handler thread (and so ``close``) forever.
_SOCKET_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ReceivedEvent:
    """One span event as sent: its name, time and attributes."""

    name: str
    time_ns: int
    attributes: dict[str, object]


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as sent, with ids in lowercase hex (as logs and UIs show them).

    ``parent_span_id`` is ``""`` for a root span (the wire sends no bytes).
    ``kind`` and ``status_code`` are the OTLP enum numbers (``Span.SpanKind``,
    ``Status.StatusCode``), so a test compares with the proto's constants
    rather than the SDK's differently numbered Python enums.
    """

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, object]
    events: tuple[ReceivedEvent, ...]
    status_code: int
    status_message: str
    start_ns: int
    end_ns: int
    resource: dict[str, object]
    scope: str


@dataclass(frozen=True)
class ReceivedPoint:
    """One metric data point as sent.

    A sum or gauge point has ``value`` (an int point is widened to float) and no
    ``count``/``sum``; a histogram point has ``count`` and ``sum`` (``None`` when
    the exporter left the optional sum out) and no ``value``. Exponential
    histograms and summaries are not kept: nothing here exports them.
    """

    metric: str
    unit: str
    kind: Literal["sum", "gauge", "histogram"]
    attributes: dict[str, object]
    value: float | None
    count: int | None
    sum: float | None
    resource: dict[str, object]


class _BadRequest(Exception):
    """A body this receiver cannot decode: answered with 400."""


def _any_value(value: AnyValue) -> object:
    """An OTLP ``AnyValue`` as the Python value an attribute was set with."""
    which = value.WhichOneof("value")
    if which == "string_value":
        return value.string_value
    if which == "bool_value":
        return value.bool_value
    if which == "int_value":
        return value.int_value
    if which == "double_value":
        return value.double_value
    if which == "bytes_value":
        return value.bytes_value
    if which == "array_value":
        return tuple(_any_value(item) for item in value.array_value.values)
    if which == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    return None


def _attributes(pairs: Sequence[KeyValue]) -> dict[str, object]:
    return {pair.key: _any_value(pair.value) for pair in pairs}


def _resource(resource: Resource) -> dict[str, object]:
    return _attributes(resource.attributes)


def _number(point: NumberDataPoint) -> float | None:
    which = point.WhichOneof("value")
    if which == "as_double":
        return point.as_double
    if which == "as_int":
        return float(point.as_int)
    return None


def _decode_spans(body: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    received: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        resource = _resource(resource_spans.resource)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                received.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        kind=span.kind,
                        attributes=_attributes(span.attributes),
                        events=tuple(
                            ReceivedEvent(
                                name=event.name,
                                time_ns=event.time_unix_nano,
                                attributes=_attributes(event.attributes),
                            )
                            for event in span.events
                        ),
                        status_code=span.status.code,
                        status_message=span.status.message,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        resource=resource,
                        scope=scope_spans.scope.name,
                    )
                )
    return received


def _decode_points(body: bytes) -> list[ReceivedPoint]:
    request = ExportMetricsServiceRequest()
    request.ParseFromString(body)
    received: list[ReceivedPoint] = []
    for resource_metrics in request.resource_metrics:
        resource = _resource(resource_metrics.resource)
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                which = metric.WhichOneof("data")
                if which == "sum" or which == "gauge":
                    numbers = metric.sum.data_points if which == "sum" else metric.gauge.data_points
                    received.extend(
                        ReceivedPoint(
                            metric=metric.name,
                            unit=metric.unit,
                            kind=which,
                            attributes=_attributes(point.attributes),
                            value=_number(point),
                            count=None,
                            sum=None,
                            resource=resource,
                        )
                        for point in numbers
                    )
                elif which == "histogram":
                    received.extend(
                        ReceivedPoint(
                            metric=metric.name,
                            unit=metric.unit,
                            kind="histogram",
                            attributes=_attributes(point.attributes),
                            value=None,
                            count=point.count,
                            sum=point.sum if point.HasField("sum") else None,
                            resource=resource,
                        )
                        for point in metric.histogram.data_points
                    )
    return received


def _decompress(body: bytes, encoding: str) -> bytes:
    """The body as the exporter serialized it, whatever compression it chose."""
    try:
        if encoding in ("", "identity"):
            return body
        if encoding == "gzip":
            return gzip.decompress(body)
        if encoding == "deflate":
            return zlib.decompress(body)
    except (OSError, EOFError, zlib.error) as error:
        raise _BadRequest(f"cannot {encoding}-decode the body: {error}") from error
    raise _BadRequest(f"unsupported Content-Encoding {encoding!r}")


class _Server(ThreadingHTTPServer):
    """The HTTP server, knowing the receiver its handlers record into."""

    daemon_threads = True

    def __init__(self, receiver: OtlpReceiver) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.receiver = receiver


class _Handler(BaseHTTPRequestHandler):
    """One request: count it, refuse it if told to, else decode and record it.

    HTTP/1.0 (the default) closes each connection after its response, so no
    keep-alive connection keeps a handler thread (and ``close``) waiting.
    """

    timeout = _SOCKET_TIMEOUT_S

    def _receiver(self) -> OtlpReceiver:
        assert isinstance(self.server, _Server)
        return self.server.receiver

    def do_POST(self) -> None:
        receiver = self._receiver()
        receiver._count_request()
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)  # read even when refusing: the client is sending it
        status = receiver.status
        if status != HTTPStatus.OK:
            self._answer(status)
            return
        if self.path not in (TRACES_PATH, METRICS_PATH):
            self._answer(HTTPStatus.NOT_FOUND)
            return
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if content_type != PROTOBUF:
            self._answer(HTTPStatus.BAD_REQUEST, f"expected {PROTOBUF}".encode())
            return
        encoding = (self.headers.get("Content-Encoding") or "").strip().lower()
        try:
            payload = _decompress(body, encoding)
            if self.path == TRACES_PATH:
                receiver._add_spans(_decode_spans(payload))
                response = ExportTraceServiceResponse().SerializeToString()
            else:
                receiver._add_points(_decode_points(payload))
                response = ExportMetricsServiceResponse().SerializeToString()
        except (_BadRequest, DecodeError) as error:
            self._answer(HTTPStatus.BAD_REQUEST, str(error).encode())
            return
        self._answer(HTTPStatus.OK, response, PROTOBUF)

    def do_GET(self) -> None:
        self._receiver()._count_request()
        self._answer(HTTPStatus.NOT_FOUND)

    def _answer(self, status: int, body: bytes = b"", content_type: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Silent: a test's output is its own, not an access log."""


class OtlpReceiver:
    """A real OTLP/HTTP endpoint on 127.0.0.1 (an OS-chosen port), for one test.

    Use as a context manager: entering starts the server on a daemon thread,
    leaving stops it and closes its socket (the suite fails on a leaked one).
    Everything received is kept until the receiver is closed; ``spans()`` and
    ``points()`` return copies, safe to read while exports keep arriving.
    """

    def __init__(self, status: int = 200) -> None:
        self._changed = threading.Condition()
        self._spans: list[ReceivedSpan] = []
        self._points: list[ReceivedPoint] = []
        self._requests = 0
        self._status = int(status)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def start(self) -> None:
        """Bind the port and serve on a daemon thread (``with`` calls this)."""
        if self._server is not None:
            raise RuntimeError("OtlpReceiver already started")
        self._server = _Server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="otlp-receiver",
            daemon=True,
        )
        self._thread.start()

    def close(self) -> None:
        """Stop serving, wait for requests in flight, close the listening socket."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.shutdown()
        server.server_close()  # also joins the handler threads
        thread.join()
        self._server = self._thread = None

    @property
    def endpoint(self) -> str:
        """The base URL, ``http://127.0.0.1:PORT``, with no signal path."""
        if self._server is None:
            raise RuntimeError("OtlpReceiver not started: use it as a context manager")
        host, port = self._server.server_address[:2]
        assert isinstance(host, str)
        return f"http://{host}:{port}"

    @property
    def traces_endpoint(self) -> str:
        """``endpoint`` + ``/v1/traces``: what ``OTLPSpanExporter(endpoint=...)`` wants."""
        return self.endpoint + TRACES_PATH

    @property
    def metrics_endpoint(self) -> str:
        """``endpoint`` + ``/v1/metrics``: what ``OTLPMetricExporter(endpoint=...)`` wants."""
        return self.endpoint + METRICS_PATH

    @property
    def status(self) -> int:
        """The status every request is answered with before decoding; 200 decodes.

        Any other value makes a collector that refuses: the body is read and
        dropped and the answer is that status with an empty body (503 is one
        the exporters retry, 400 one they do not).
        """
        with self._changed:
            return self._status

    @status.setter
    def status(self, status: int) -> None:
        with self._changed:
            self._status = int(status)

    @property
    def fail_with(self) -> int | None:
        """``status`` when it is an error, else None; setting None accepts again."""
        status = self.status
        return None if status == HTTPStatus.OK else status

    @fail_with.setter
    def fail_with(self, status: int | None) -> None:
        self.status = HTTPStatus.OK if status is None else status

    @property
    def requests(self) -> int:
        """How many HTTP requests arrived, refused and malformed ones included."""
        with self._changed:
            return self._requests

    def spans(self) -> list[ReceivedSpan]:
        """Every span received so far, in arrival order (a copy)."""
        with self._changed:
            return list(self._spans)

    def points(self) -> list[ReceivedPoint]:
        """Every metric point received so far, in arrival order (a copy)."""
        with self._changed:
            return list(self._points)

    def wait_for_spans(
        self,
        predicate: Callable[[list[ReceivedSpan]], bool],
        timeout: float = DEFAULT_WAIT_S,
    ) -> list[ReceivedSpan]:
        """Block until ``predicate(all spans so far)`` holds; return that list.

        Exporters send from their own threads (a batch processor, a periodic
        reader), so a test waits for the state it needs instead of a time.
        Raises AssertionError naming the spans received if it never holds.
        """
        return self._wait_for(
            lambda: self._spans,
            predicate,
            timeout,
            lambda spans: f"spans received: {[span.name for span in spans]}",
        )

    def wait_for_points(
        self,
        predicate: Callable[[list[ReceivedPoint]], bool],
        timeout: float = DEFAULT_WAIT_S,
    ) -> list[ReceivedPoint]:
        """Block until ``predicate(all points so far)`` holds; return that list.

        Raises AssertionError naming the metrics received if it never holds.
        """
        return self._wait_for(
            lambda: self._points,
            predicate,
            timeout,
            lambda points: (
                "points received: " + str([f"{point.metric} ({point.kind})" for point in points])
            ),
        )

    def _wait_for(
        self,
        items: Callable[[], list[T]],
        predicate: Callable[[list[T]], bool],
        timeout: float,
        describe: Callable[[list[T]], str],
    ) -> list[T]:
        """Re-check ``predicate`` on a copy each time the handler adds data.

        The predicate runs with the lock held, on a copy, so it sees a
        consistent list and may keep it; it should not call back into the
        receiver.
        """
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                snapshot = list(items())
                if predicate(snapshot):
                    return snapshot
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"OtlpReceiver: condition not met within {timeout}s "
                        f"({self._requests} requests); {describe(snapshot)}"
                    )
                self._changed.wait(remaining)

    def _count_request(self) -> None:
        with self._changed:
            self._requests += 1
            self._changed.notify_all()

    def _add_spans(self, spans: Sequence[ReceivedSpan]) -> None:
        with self._changed:
            self._spans.extend(spans)
            self._changed.notify_all()

    def _add_points(self, points: Sequence[ReceivedPoint]) -> None:
        with self._changed:
            self._points.extend(points)
            self._changed.notify_all()
