"""The loopback server other suites build on: incremental delivery, stalls, bookkeeping."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator

import httpx2

from toolprep.testing import (
    FakeProviderServer,
    RecordedRequest,
    ScriptedResponse,
    anthropic_sse,
    split_sse_events,
)

WAIT_S = 30.0


def _until(condition: Callable[[], bool]) -> None:
    """Poll for a state the server reaches on its own threads; the deadline only fails a hang."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "the server never reached the state"
        threading.Event().wait(0.01)


def test_split_keeps_bytes_and_an_unterminated_last_event() -> None:
    raw = b"event: a\r\ndata: 1\r\n\r\ndata: 2\n\ndata: 3"
    assert split_sse_events(raw) == [b"event: a\r\ndata: 1\r\n\r\n", b"data: 2\n\n", b"data: 3"]


def test_events_arrive_one_by_one_while_the_server_paces_them() -> None:
    with FakeProviderServer() as server:
        server.enqueue(
            ScriptedResponse([b"data: 1\n\n", b"data: 2\n\n", b"data: 3\n\n"], pace_s=0.15)
        )
        arrivals: list[float] = []
        received: list[bytes] = []
        start = time.monotonic()
        with httpx2.stream("POST", server.base_url + "/anything", json={"k": 1}) as response:
            for chunk in response.iter_bytes():
                arrivals.append(time.monotonic() - start)
                received.append(chunk)
        (request,) = server.requests
    assert request.path == "/anything" and request.body == {"k": 1}
    assert b"".join(received) == b"data: 1\n\ndata: 2\n\ndata: 3\n\n"
    # Paced, not sent at once: the body came in pieces, the last no sooner than two paces in.
    # (Only lower bounds: a busy machine can delay a read, never hasten the server's sleep.)
    assert len(arrivals) >= 2
    assert arrivals[-1] >= 2 * 0.15


def test_stop_releases_a_stalled_stream() -> None:
    server = FakeProviderServer().start()
    server.enqueue(ScriptedResponse([b"data: 1\n\n"], stall_after=1))
    first_chunk = threading.Event()
    done = threading.Event()
    ended_by: list[BaseException | None] = []

    def read() -> None:
        try:
            with httpx2.stream("POST", server.base_url, json={}, timeout=60) as response:
                for _ in response.iter_bytes():
                    first_chunk.set()
            ended_by.append(None)
        except httpx2.HTTPError as exc:
            ended_by.append(exc)
        done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert first_chunk.wait(30)  # the stream is open and has stalled after its first event
    assert not done.is_set()
    server.stop()
    assert done.wait(120)
    # Released by the stop (the server closed the stalled stream), not by the read timeout.
    assert not isinstance(ended_by[0], httpx2.TimeoutException), ended_by
    assert server.pending == 0


def test_a_responder_answers_what_nothing_was_queued_for() -> None:
    def answer(request: RecordedRequest) -> ScriptedResponse:
        return ScriptedResponse(body={"answered": request.path})

    with FakeProviderServer(responder=answer) as server:
        server.enqueue(ScriptedResponse(body={"queued": True}))
        first = httpx2.post(server.base_url + "/one", json={}).json()
        second = httpx2.post(server.base_url + "/two", json={}).json()
        assert [r.path for r in server.requests] == ["/one", "/two"]
    assert first == {"queued": True}
    assert second == {"answered": "/two"}


def test_keep_requests_false_records_nothing() -> None:
    with FakeProviderServer(keep_requests=False) as server:
        server.enqueue(ScriptedResponse(body={}))
        assert httpx2.post(server.base_url, json={"k": 1}).status_code == 200
        assert server.requests == []


def test_stats_count_events_and_streams_and_answer_over_get() -> None:
    with FakeProviderServer() as server:
        server.enqueue(
            ScriptedResponse(events=anthropic_sse("hi", fragment_size=1)),
            ScriptedResponse(events=[b"data: 1\n\n"], stall_after=1),
        )
        sent = len(split_sse_events(anthropic_sse("hi", fragment_size=1)))
        with httpx2.stream("POST", server.base_url, json={}) as response:
            body = b"".join(response.iter_bytes())
        assert body == anthropic_sse("hi", fragment_size=1).encode()
        with httpx2.stream("POST", server.base_url, json={}, timeout=60) as stalled:
            chunks = stalled.iter_bytes()
            assert next(chunks) == b"data: 1\n\n"
            _until(lambda: server.stats()["streams_stalled"] == 1)
            over_http = httpx2.get(server.base_url + "/stats").json()
            assert over_http == server.stats()
            assert over_http == {
                "events_sent": sent + 1,
                "streams_started": 2,
                "streams_open": 1,
                "streams_stalled": 1,
                "disconnects": 0,
            }
        _until(lambda: server.stats()["streams_open"] == 0)
        assert server.stats()["streams_stalled"] == 0
        assert httpx2.get(server.base_url + "/other").status_code == 404


def test_an_iterator_of_events_is_drawn_as_the_stream_goes() -> None:
    drawn = itertools.count()

    def endless() -> Iterator[bytes]:
        for n in drawn:
            yield b"data: %d\n\n" % n

    with FakeProviderServer() as server:
        server.enqueue(ScriptedResponse(events=endless(), stall_after=2))
        with httpx2.stream("POST", server.base_url, json={}, timeout=60) as response:
            chunks = response.iter_bytes()
            received = next(chunks)
            _until(lambda: server.stats()["streams_stalled"] == 1)
            # An endless script streams: the server drew two events, and the one it
            # stopped on, not the whole (endless) iterator up front.
            assert next(drawn) == 3
    assert received.startswith(b"data: 0\n\n")
