"""The loopback server other suites build on: incremental delivery, stalls, bookkeeping."""

from __future__ import annotations

import threading
import time

import httpx2

from tests.support.fake_provider import FakeProviderServer, ScriptedResponse, split_sse_events


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
