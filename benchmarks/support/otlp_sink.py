"""A loopback OTLP/HTTP receiver that takes every export and keeps only counts.

``benchmarks.load --telemetry on`` points the runtime's exporters at it, so spans and
metrics really leave the process over HTTP as they would to a collector. It runs in the
benchmark's parent process, on threads of its own, so what receiving and decoding cost is
not counted as the runtime's. It answers ``200`` with an empty body (what a collector that
accepted everything answers) and counts requests, bytes and, when the OTLP protobuf
classes are installed, the spans and metric data points in them: the reader sees that the
export happened and how much of it there was.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["OtlpSink", "otlp_sink"]

LOOPBACK = "127.0.0.1"
SIGNALS = {"/v1/traces": "traces", "/v1/metrics": "metrics"}


@dataclass
class _Counts:
    requests: int = 0
    bytes: int = 0
    items: int | None = None
    """Spans (traces) or data points (metrics); None when they could not be decoded."""


@dataclass
class OtlpSink:
    """The receiver's address and what it got so far, by signal."""

    port: int
    counts: dict[str, _Counts] = field(
        default_factory=lambda: {s: _Counts() for s in SIGNALS.values()}
    )
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def endpoint(self) -> str:
        """The base URL for ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the SDK appends ``/v1/...``)."""
        return f"http://{LOOPBACK}:{self.port}"

    def took(self, signal: str, body: bytes) -> None:
        items = _items(signal, body)
        with self.lock:
            counts = self.counts[signal]
            counts.requests += 1
            counts.bytes += len(body)
            if items is not None:
                counts.items = (counts.items or 0) + items

    def summary(self) -> dict[str, dict[str, int | None]]:
        with self.lock:
            return {
                signal: {"requests": c.requests, "bytes": c.bytes, "items": c.items}
                for signal, c in self.counts.items()
            }


def _items(signal: str, body: bytes) -> int | None:
    """Spans or metric data points in one export, if the protobuf classes are there."""
    try:
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
            ExportMetricsServiceRequest,
        )
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )
    except ImportError:
        return None
    if signal == "traces":
        traces = ExportTraceServiceRequest.FromString(body)
        return sum(len(s.spans) for r in traces.resource_spans for s in r.scope_spans)
    metrics = ExportMetricsServiceRequest.FromString(body)
    return sum(
        _points(metric)
        for r in metrics.resource_metrics
        for s in r.scope_metrics
        for metric in s.metrics
    )


def _points(metric: Any) -> int:
    kind = metric.WhichOneof("data")
    return len(getattr(metric, kind).data_points) if kind else 0


@contextmanager
def otlp_sink() -> Iterator[OtlpSink]:
    """Listen on a free loopback port until the block ends."""
    sink: OtlpSink | None = None

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            signal = SIGNALS.get(self.path)
            if signal is not None and sink is not None:
                sink.took(signal, body)
            self.send_response(200 if signal is not None else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: one line per export would bury the benchmark's output."""

    server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
    server.daemon_threads = True
    sink = OtlpSink(server.server_port)
    thread = threading.Thread(target=server.serve_forever, name="otlp-sink", daemon=True)
    thread.start()
    try:
        yield sink
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
