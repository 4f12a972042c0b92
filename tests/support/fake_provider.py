"""A real loopback HTTP server that plays scripted provider responses.

Tests drive the official SDK clients against it, so everything between the
socket and our adapters (HTTP framing, chunked bodies, SDK retries, error
mapping) runs for real instead of being mocked. It answers any POST path,
which covers the Anthropic SDK (``{base_url}/v1/messages``) and the OpenAI
SDK (``{base_url}/v1/chat/completions`` with ``base_url=".../v1"``).

Each request consumes the next ``ScriptedResponse`` (FIFO). Streams are sent
with chunked transfer encoding, one chunk per SSE event, so the client reads
them incrementally. ``stall_after`` blocks mid-stream until the client goes
away or the server stops (for cancellation tests); ``cut_after`` drops the
socket without finishing the chunked body (a connection cut mid-stream).

The module also builds synthetic SSE transcripts in each provider's wire
format (``anthropic_sse`` / ``openai_sse``) so tests can state a turn in one
line instead of pasting transcripts.
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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, Self

__all__ = [
    "FakeProviderServer",
    "RecordedRequest",
    "ScriptedResponse",
    "anthropic_sse",
    "openai_sse",
    "split_sse_events",
    "unterminated_line",
]


def split_sse_events(text: str | bytes) -> list[bytes]:
    """Split an SSE transcript into events, each with its own terminating blank line.

    Bytes are kept exactly (CRLF stays CRLF); a trailing event that lacks the
    final blank line stays unterminated, so EOF handling is exercised as well.
    """
    raw = text.encode("utf-8") if isinstance(text, str) else text
    events: list[bytes] = []
    current: list[bytes] = []
    for line in raw.splitlines(keepends=True):
        current.append(line)
        if line in (b"\n", b"\r\n", b"\r"):
            if len(current) > 1:
                events.append(b"".join(current))
            current = []
    if current and b"".join(current).strip():
        events.append(b"".join(current))
    return events


@dataclass(frozen=True)
class ScriptedResponse:
    """One scripted answer to one HTTP request.

    ``events`` is either a list of raw event byte strings (sent one chunk each)
    or an SSE transcript (split into events with ``split_sse_events``).
    A non-200 ``status``, or any ``body``, sends ``body`` (bytes, str, or a
    JSON-able object) with a Content-Length instead of a stream.
    """

    events: Sequence[bytes] | str = ()
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
        if isinstance(self.events, str):
            return split_sse_events(self.events)
        return list(self.events)

    def body_bytes(self) -> bytes:
        if self.body is None:
            return b""
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode("utf-8")
        return json.dumps(self.body).encode("utf-8")


class RecordedRequest(NamedTuple):
    path: str
    headers: dict[str, str]
    body: Any


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: FakeProviderServer


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output clean; requests are inspected through ``.requests``."""

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
        try:
            for n, event in enumerate(scripted.event_list()):
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
    tests may enqueue while a client streams.
    """

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._host = host
        self._lock = threading.Lock()
        self._queue: deque[ScriptedResponse] = deque()
        self._requests: list[RecordedRequest] = []
        self._stopping = threading.Event()
        self._disconnects = 0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle --------------------------------------------------------------

    def start(self) -> Self:
        if self._server is not None:
            return self
        self._stopping.clear()
        server = _Server((self._host, 0), _Handler)
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

    def reset(self) -> None:
        """Forget the script, the requests and the disconnects: a server several tests share
        (behind processes started once for all of them) starts each test clean."""
        with self._lock:
            self._queue.clear()
            self._requests.clear()
            self._disconnects = 0

    def _record_and_next(self, request: RecordedRequest) -> ScriptedResponse | None:
        with self._lock:
            self._requests.append(request)
            return self._queue.popleft() if self._queue else None

    def _note_disconnect(self) -> None:
        with self._lock:
            self._disconnects += 1


# --- synthetic transcripts ------------------------------------------------------


def _sse_event(name: str | None, payload: Mapping[str, Any] | str) -> str:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {data}\n\n"


def _fragments(text: str, size: int) -> list[str]:
    if size <= 0 or not text:
        return [text]
    return [text[i : i + size] for i in range(0, len(text), size)]


ToolCallSpec = tuple[str, str, Mapping[str, Any]]


def anthropic_sse(
    text: str | None = None,
    tool_calls: Iterable[ToolCallSpec] = (),
    *,
    thinking: str | None = None,
    signature: str = "c2lnbmF0dXJl",
    fragment_size: int = 8,
    args_fragment_size: int | None = None,
    stop_reason: str | None = None,
    message_id: str = "msg_fake_1",
    model: str = "claude-fake",
    input_tokens: int = 10,
    output_tokens: int = 20,
    terminal: bool = True,
) -> str:
    """An Anthropic Messages stream: optional thinking, text, then tool_use blocks.

    Text is split into ``fragment_size`` pieces, tool arguments into
    ``args_fragment_size`` pieces (default: the same). The
    default stop reason is ``tool_use`` when there are tool calls, else
    ``end_turn``. ``terminal=False`` leaves out ``message_delta``/``message_stop``.
    """
    calls = list(tool_calls)
    out = [
        _sse_event(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": input_tokens, "output_tokens": 1},
                },
            },
        )
    ]
    index = 0
    if thinking is not None:
        out.append(
            _sse_event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                },
            )
        )
        for piece in _fragments(thinking, fragment_size):
            out.append(
                _sse_event(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "thinking_delta", "thinking": piece},
                    },
                )
            )
        out.append(
            _sse_event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "signature_delta", "signature": signature},
                },
            )
        )
        out.append(_sse_event("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    if text is not None:
        out.append(
            _sse_event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                },
            )
        )
        for piece in _fragments(text, fragment_size):
            out.append(
                _sse_event(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "text_delta", "text": piece},
                    },
                )
            )
        out.append(_sse_event("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    for call_id, name, args in calls:
        out.append(
            _sse_event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}},
                },
            )
        )
        out.append(
            _sse_event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": ""},
                },
            )
        )
        for piece in _fragments(json.dumps(dict(args)), args_fragment_size or fragment_size):
            out.append(
                _sse_event(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    },
                )
            )
        out.append(_sse_event("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    if terminal:
        reason = stop_reason or ("tool_use" if calls else "end_turn")
        out.append(
            _sse_event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": reason, "stop_sequence": None},
                    "usage": {"output_tokens": output_tokens},
                },
            )
        )
        out.append(_sse_event("message_stop", {"type": "message_stop"}))
    return "".join(out)


def openai_sse(
    text: str | None = None,
    tool_calls: Iterable[ToolCallSpec] = (),
    *,
    reasoning: str | None = None,
    fragment_size: int = 8,
    finish_reason: str | None = None,
    completion_id: str = "chatcmpl-fake-1",
    model: str = "gpt-fake",
    prompt_tokens: int = 10,
    completion_tokens: int = 20,
    usage_chunk: bool = True,
    done: bool = True,
) -> str:
    """An OpenAI Chat Completions stream: optional reasoning, text, then tool calls.

    Tool calls follow the official shape: the first fragment carries index,
    id, name and ``""`` arguments; later ones only argument pieces. The
    default finish reason is ``tool_calls`` when there are calls, else
    ``stop``. ``usage_chunk`` adds the trailing choices-less usage chunk that
    ``stream_options.include_usage`` produces; ``done=False`` omits ``[DONE]``.
    """
    calls = list(tool_calls)

    def chunk(delta: Mapping[str, Any], finish: str | None = None) -> str:
        return _sse_event(
            None,
            {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": 1700000000,
                "model": model,
                "choices": [{"index": 0, "delta": dict(delta), "finish_reason": finish}],
            },
        )

    out = [chunk({"role": "assistant", "content": ""})]
    if reasoning is not None:
        out.extend(
            chunk({"reasoning_content": piece}) for piece in _fragments(reasoning, fragment_size)
        )
    if text is not None:
        out.extend(chunk({"content": piece}) for piece in _fragments(text, fragment_size))
    for n, (call_id, name, args) in enumerate(calls):
        out.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": n,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": ""},
                        }
                    ]
                }
            )
        )
        for piece in _fragments(json.dumps(dict(args)), fragment_size):
            out.append(chunk({"tool_calls": [{"index": n, "function": {"arguments": piece}}]}))
    if finish_reason != "":
        out.append(chunk({}, finish_reason or ("tool_calls" if calls else "stop")))
    if usage_chunk:
        out.append(
            _sse_event(
                None,
                {
                    "id": completion_id,
                    "object": "chat.completion.chunk",
                    "created": 1700000000,
                    "model": model,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": completion_tokens,
                        "total_tokens": prompt_tokens + completion_tokens,
                    },
                },
            )
        )
    if done:
        out.append(_sse_event(None, "[DONE]"))
    return "".join(out)


def unterminated_line(
    size: int, *, head: bytes = b"data: ", fill: bytes = b"x", piece: int = 64 * 1024
) -> list[bytes]:
    """``head`` then filler to ``size`` bytes, never ending the line, as ``piece``-byte events.

    Served as ``ScriptedResponse(events=...)`` each piece is one HTTP chunk,
    so the client reads one huge SSE line incrementally, as from a server
    that never finishes an event.
    """
    body = head + fill * (size - len(head))
    return [body[i : i + piece] for i in range(0, len(body), piece)]
