"""The loopback provider: a real HTTP server on 127.0.0.1 that plays provider responses.

Point the official SDK clients (or toolprep's providers) at it, and everything between
the socket and the adapters (HTTP framing, chunked bodies, SDK retries, error mapping)
runs for real instead of being mocked. It answers any POST path, which covers the
Anthropic SDK (``{base_url}/v1/messages``) and the OpenAI SDK
(``{base_url}/v1/chat/completions`` with ``base_url=".../v1"``).

Each request consumes the next ``ScriptedResponse`` (FIFO); a server built with a
``responder`` asks it for the answer when nothing is queued, which is how a load test
answers any number of requests. Streams are sent with chunked transfer encoding, one
chunk per SSE event, so the client reads them incrementally. ``stall_after`` blocks
mid-stream until the client goes away or the server stops (for cancellation tests);
``cut_after`` drops the socket without finishing the chunked body (a connection cut
mid-stream). ``GET /stats`` answers the server's counters as JSON, for a client in
another process. The transcripts themselves come from ``toolprep.testing.sse``.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, Self

from toolprep.testing.sse import split_sse_events

__all__ = [
    "FakeProviderServer",
    "RecordedRequest",
    "Responder",
    "ScriptedResponse",
]


@dataclass(frozen=True)
class ScriptedResponse:
    """One scripted answer to one HTTP request.

    ``events`` is either raw event byte strings (sent one chunk each) or an SSE
    transcript (split into events with ``split_sse_events``). An iterator is drawn one
    event at a time, just before that event is written, so a generator can pace its
    events or stamp them with the time they leave.
    A non-200 ``status``, or any ``body``, sends ``body`` (bytes, str, or a
    JSON-able object) with a Content-Length instead of a stream.
    """

    events: Iterable[bytes] | str = ()
    pace_s: float = 0.0
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    stall_after: int | None = None
    cut_after: int | None = None
    body: bytes | str | Mapping[str, Any] | None = None

    @classmethod
    def from_fixture(cls, path: str | Path, **kwargs: Any) -> ScriptedResponse:
        """A stream of the SSE transcript stored at ``path``, byte for byte."""
        return cls(events=split_sse_events(Path(path).read_bytes()), **kwargs)

    def event_list(self) -> list[bytes]:
        """Every event, as separate byte strings (this consumes an iterator)."""
        return list(self._event_iter())

    def _event_iter(self) -> Iterable[bytes]:
        if isinstance(self.events, str):
            return split_sse_events(self.events)
        return self.events

    def body_bytes(self) -> bytes:
        if self.body is None:
            return b""
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode("utf-8")
        return json.dumps(self.body).encode("utf-8")


class RecordedRequest(NamedTuple):
    """One request as the server received it: the body is parsed JSON when it was JSON."""

    path: str
    headers: dict[str, str]
    body: Any


Responder = Callable[[RecordedRequest], ScriptedResponse]
"""Answers a request nothing was queued for (``FakeProviderServer(responder=...)``)."""


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # A load test opens hundreds of connections at once; the default backlog of 5 would
    # make the kernel drop their SYNs and the clients retry a second later.
    request_queue_size = 4096
    owner: FakeProviderServer


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output clean; requests are inspected through ``.requests``."""

    def do_GET(self) -> None:
        """``GET /stats``: the counters, for a client in another process."""
        if self.path.split("?", 1)[0] != "/stats":
            self._send_body(404, {"content-type": "application/json"}, b"{}")
            return
        body = json.dumps(self.server.owner.stats()).encode()
        self._send_body(200, {"content-type": "application/json"}, body)

    def do_POST(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        headers = {k.lower(): v for k, v in self.headers.items()}
        scripted = owner._record_and_next(RecordedRequest(self.path, headers, body))
        if scripted is None:
            self._send_body(
                500,
                {"content-type": "application/json"},
                json.dumps(
                    {
                        "type": "error",
                        "error": {
                            "type": "api_error",
                            "message": "FakeProviderServer: no scripted response queued "
                            f"for POST {self.path}",
                        },
                    }
                ).encode(),
            )
            return
        if scripted.status != 200 or scripted.body is not None:
            headers_out = {"content-type": "application/json", **scripted.headers}
            self._send_body(scripted.status, headers_out, scripted.body_bytes())
            return
        self._stream(owner, scripted)

    def _send_body(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def _stream(self, owner: FakeProviderServer, scripted: ScriptedResponse) -> None:
        self.send_response(200)
        headers = {
            "content-type": "text/event-stream",
            "cache-control": "no-cache",
            **scripted.headers,
        }
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        owner._note_stream(+1)
        try:
            for n, event in enumerate(scripted._event_iter()):
                if scripted.cut_after is not None and n >= scripted.cut_after:
                    self._cut()
                    return
                if scripted.stall_after is not None and n >= scripted.stall_after:
                    self._stall(owner)
                    return
                if n and scripted.pace_s and owner._stopping.wait(scripted.pace_s):
                    return  # the server is stopping
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
                owner._note_event()
            if scripted.cut_after is not None:
                self._cut()
                return
            if scripted.stall_after is not None:
                self._stall(owner)
                return
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            owner._note_stream(-1)

    def _cut(self) -> None:
        """Drop the connection mid-body: the client sees an incomplete chunked message."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)
        self.connection.close()

    def _stall(self, owner: FakeProviderServer) -> None:
        """Hold the stream open, sending nothing, until the client closes or the server stops."""
        self.close_connection = True
        sock = self.connection
        with owner._stalled_stream():
            self._hold(owner, sock)

    def _hold(self, owner: FakeProviderServer, sock: socket.socket) -> None:
        while not owner._stopping.is_set():
            readable, _, _ = select.select([sock], [], [], 0.05)
            if readable:
                try:
                    if sock.recv(1, socket.MSG_PEEK) == b"":
                        owner._note_disconnect()
                        return
                except OSError:
                    owner._note_disconnect()
                    return
                time.sleep(0.01)


class FakeProviderServer:
    """Loopback HTTP server answering each POST with the next scripted response.

    Use as a context manager or call ``start()``/``stop()``. Thread-safe:
    tests may enqueue while a client streams. ``responder`` answers a request when
    nothing is queued (without one such a request gets a 500 naming the path);
    ``keep_requests=False`` keeps no record of requests, for a server that answers
    requests for hours. ``port`` 0 takes a free one.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        *,
        port: int = 0,
        responder: Responder | None = None,
        keep_requests: bool = True,
    ) -> None:
        self._host = host
        self._port = port
        self._responder = responder
        self._keep_requests = keep_requests
        self._lock = threading.Lock()
        self._queue: deque[ScriptedResponse] = deque()
        self._requests: list[RecordedRequest] = []
        self._stopping = threading.Event()
        self._disconnects = 0
        self._events_sent = 0
        self._streams_started = 0
        self._streams_open = 0
        self._streams_stalled = 0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle --------------------------------------------------------------

    def start(self) -> Self:
        if self._server is not None:
            return self
        self._stopping.clear()
        server = _Server((self._host, self._port), _Handler)
        server.owner = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-provider",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server = self._server
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- scripting and inspection ------------------------------------------------

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("FakeProviderServer is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def enqueue(self, *responses: ScriptedResponse) -> None:
        with self._lock:
            self._queue.extend(responses)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def pending(self) -> int:
        """Scripted responses not yet consumed."""
        with self._lock:
            return len(self._queue)

    @property
    def disconnects(self) -> int:
        """How many stalled streams ended because the client closed the connection."""
        with self._lock:
            return self._disconnects

    def stats(self) -> dict[str, int]:
        """The counters ``GET /stats`` answers: events and streams sent so far, streams open
        now and streams held by ``stall_after`` now, and the disconnects."""
        with self._lock:
            return {
                "events_sent": self._events_sent,
                "streams_started": self._streams_started,
                "streams_open": self._streams_open,
                "streams_stalled": self._streams_stalled,
                "disconnects": self._disconnects,
            }

    def reset(self) -> None:
        """Forget the script, the requests and the disconnects: a server several tests share
        (behind processes started once for all of them) starts each test clean."""
        with self._lock:
            self._queue.clear()
            self._requests.clear()
            self._disconnects = 0
            self._events_sent = 0
            self._streams_started = 0

    def _record_and_next(self, request: RecordedRequest) -> ScriptedResponse | None:
        with self._lock:
            if self._keep_requests:
                self._requests.append(request)
            if self._queue:
                return self._queue.popleft()
        return None if self._responder is None else self._responder(request)

    def _note_disconnect(self) -> None:
        with self._lock:
            self._disconnects += 1

    def _note_event(self) -> None:
        with self._lock:
            self._events_sent += 1

    def _note_stream(self, change: int) -> None:
        with self._lock:
            self._streams_open += change
            if change > 0:
                self._streams_started += 1

    @contextlib.contextmanager
    def _stalled_stream(self) -> Iterator[None]:
        with self._lock:
            self._streams_stalled += 1
        try:
            yield
        finally:
            with self._lock:
                self._streams_stalled -= 1
