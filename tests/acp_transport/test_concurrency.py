"""Many threads on both ends at once: every request answered exactly once, no torn lines."""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import orjson
import pytest

from tests.acp_transport.conftest import TIMEOUT, WireFactory
from toolprep.runtime.acp.jsonrpc_connection import JsonRpcConnection
from toolprep.runtime.acp.jsonrpc_router import DEFERRED

THREADS = 8
PER_THREAD = 125  # 1000 requests in all


@pytest.mark.parametrize("request_workers", [0, 4])
def test_1000_interleaved_requests_answered_exactly_once(
    wire: WireFactory, request_workers: int
) -> None:
    """Writers on several peer threads; answers from the reader, futures and other threads,
    mixed with notifications sent concurrently by the connection's own side."""
    w = wire(request_workers=request_workers)
    calls: Counter[Any] = Counter()
    calls_lock = threading.Lock()
    finishers: list[threading.Thread] = []

    def handle(params: Any, request_id: Any) -> Any:
        with calls_lock:
            calls[request_id] += 1
        style = params["n"] % 3
        if style == 0:
            return {"echo": params}
        if style == 1:
            future: Future[Any] = Future()
            thread = threading.Thread(target=future.set_result, args=({"echo": params},))
            finishers.append(thread)
            thread.start()
            return future
        thread = threading.Thread(target=lambda: w.conn.respond(request_id, {"echo": params}))
        finishers.append(thread)
        thread.start()
        return DEFERRED

    w.conn.on_request("work", handle)
    stop_chatter = threading.Event()

    def chatter() -> None:  # notifications interleaved with the responses
        n = 0
        while not stop_chatter.is_set():
            w.conn.notify("session/update", {"n": n, "pad": "x" * random.randint(0, 3000)})
            n += 1

    chatterers = [threading.Thread(target=chatter) for _ in range(2)]
    for thread in chatterers:
        thread.start()

    def client(thread_no: int) -> None:
        for i in range(PER_THREAD):
            request_id: Any = f"t{thread_no}-{i}" if i % 2 else thread_no * 10_000 + i
            w.peer.send(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "method": "work",
                    "params": {"n": i, "t": thread_no},
                }
            )

    writers = [threading.Thread(target=client, args=(t,)) for t in range(THREADS)]
    for thread in writers:
        thread.start()
    answers: dict[Any, Any] = {}
    duplicates: list[Any] = []
    while len(answers) < THREADS * PER_THREAD:
        message = w.peer.recv(timeout=TIMEOUT)
        if "method" in message:
            continue
        if message["id"] in answers:
            duplicates.append(message["id"])
        answers[message["id"]] = message["result"]["echo"]
    stop_chatter.set()
    for thread in writers + chatterers + finishers:
        thread.join(TIMEOUT)

    assert duplicates == []
    assert len(answers) == THREADS * PER_THREAD
    for request_id, params in answers.items():
        t, i = params["t"], params["n"]
        assert request_id == (f"t{t}-{i}" if i % 2 else t * 10_000 + i)
    assert set(calls.values()) == {1}
    # Every line the peer got is exactly one complete JSON object.
    for line in w.peer.raw_lines:
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        orjson.loads(line)


Linked = Callable[..., tuple[JsonRpcConnection, JsonRpcConnection]]


def test_concurrent_outgoing_requests_in_both_directions(linked: Linked) -> None:
    client, agent = linked(request_workers=4)
    client.on_request("client/square", lambda params, request_id: params["n"] ** 2)
    agent.on_request("agent/negate", lambda params, request_id: -params["n"])
    client.start()
    agent.start()
    results: dict[str, list[Any]] = {"client": [], "agent": []}

    def run(side: str, conn: JsonRpcConnection, method: str) -> None:
        futures = [conn.request(method, {"n": n}) for n in range(250)]
        results[side] = [f.result(TIMEOUT) for f in futures]

    threads = [
        threading.Thread(target=run, args=("client", client, "agent/negate")),
        threading.Thread(target=run, args=("agent", agent, "client/square")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    assert results["client"] == [-n for n in range(250)]
    assert results["agent"] == [n * n for n in range(250)]
