"""``session/load`` over a fresh connection: connect -> first replayed frame -> the reply."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from benchmarks import _harness as h
from benchmarks.serve.daemon import Daemon
from benchmarks.serve.ws_client import CALL_TIMEOUT_S, Line, WsLoadClient

__all__ = ["load_over_fresh_connection", "summarize_loads"]


def load_over_fresh_connection(daemon: Daemon, session_id: str, cwd: str) -> dict[str, Any]:
    """Connect, ``initialize``, ``session/load``; milliseconds from the connect and the request.

    ``first_frame`` is the first replayed ``session/update`` read; ``reply``
    the load's answer, which comes after every replayed frame. The reader
    thread's CPU over the load is this side's share of the time (the frames
    are parsed like an editor would), the daemon's CPU the other side's.
    """
    marks: dict[str, int] = {}
    frames = [0]
    replied = threading.Event()
    reply: list[Line] = []

    def on_update(sid: str, _update: dict[str, Any], _read_ns: int) -> None:
        if sid == session_id:
            frames[0] += 1
            marks.setdefault("first_frame", time.perf_counter_ns())

    def on_reply(response: Line, _read_ns: int) -> None:
        marks["reply"] = time.perf_counter_ns()
        reply.append(response)
        replied.set()

    started = time.perf_counter_ns()
    client = WsLoadClient(daemon.url, daemon.token, on_update, "bench-load")
    try:
        connected = time.perf_counter_ns()
        client.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        reader_cpu0 = h.thread_cpu_seconds(client.reader)
        daemon_cpu0 = daemon.cpu_seconds()
        requested = time.perf_counter_ns()
        client.request(
            "session/load", {"sessionId": session_id, "cwd": cwd, "mcpServers": []}, on_reply
        )
        if not replied.wait(CALL_TIMEOUT_S):
            raise TimeoutError(f"no answer to session/load of {session_id}")
        reader_cpu = h.thread_cpu_seconds(client.reader) - reader_cpu0
        daemon_cpu = daemon.cpu_seconds() - daemon_cpu0
    finally:
        client.close()
    if "error" in reply[0]:
        raise RuntimeError(f"session/load of {session_id} failed: {reply[0]['error']}")

    def ms(since: int, mark: str) -> float | None:
        return round((marks[mark] - since) / 1e6, 3) if mark in marks else None

    return {
        "frames": frames[0],
        "connect_ms": round((connected - started) / 1e6, 3),
        "first_frame_ms_from_connect": ms(started, "first_frame"),
        "reply_ms_from_connect": ms(started, "reply"),
        "first_frame_ms": ms(requested, "first_frame"),
        "reply_ms": ms(requested, "reply"),
        "client_reader_cpu_ms": round(reader_cpu * 1000, 2),
        "daemon_cpu_ms": round(daemon_cpu * 1000, 2),
    }


def summarize_loads(samples: Sequence[dict[str, Any]], *, from_connect: bool) -> dict[str, Any]:
    suffix = "_from_connect" if from_connect else ""
    out: dict[str, Any] = {"count": len(samples)}
    for key in ("first_frame_ms", "reply_ms"):
        values = sorted(s[key.replace("_ms", "_ms" + suffix)] or 0.0 for s in samples)
        out[key] = {
            "p50": h.percentile(values, 50.0),
            "max": values[-1] if values else None,
        }
    out["frames"] = {
        "min": min((s["frames"] for s in samples), default=None),
        "max": max((s["frames"] for s in samples), default=None),
    }
    return out
