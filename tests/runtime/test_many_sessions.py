"""1000 sessions at once through one runtime, on a constant number of threads."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from benchmarks._harness import bench_registry, loopback_server
from tests.support.runtime_harness import RecordingSink, check_cards, lifecycle
from toolprep.actors.stream_reader import ModelRoute
from toolprep.messages.content import TextPart
from toolprep.runtime.host import Runtime, RuntimeConfig
from toolprep.runtime.providers.factory import build_provider

RUNTIME_THREADS = (
    "toolprep-",
    "AcpEmitter",
    "ToolExecutor",
    "PreparationTracker",
    "StreamReader",
    "SessionSupervisor",
)


def runtime_threads() -> int:
    """Threads the runtime owns (other tests' leftovers in this process are not counted)."""
    return sum(t.name.startswith(RUNTIME_THREADS) for t in threading.enumerate())


def _run_sessions(runtime: Runtime, count: int, cwd: Path) -> tuple[int, list[RecordingSink]]:
    sinks = [RecordingSink() for _ in range(count)]
    sessions = [runtime.open_session(cwd, sink) for sink in sinks]
    peak = runtime_threads()
    replies = [runtime.prompt(sid, [TextPart("go")]) for sid in sessions]
    for sid, sink, reply in zip(sessions, sinks, replies, strict=False):
        reply.add_done_callback(lambda _f, sid=sid, sink=sink: sink.mark_turn_end(sid))
    deadline = time.monotonic() + 240
    while not all(r.done() for r in replies):
        peak = max(peak, runtime_threads())
        assert time.monotonic() < deadline, "sessions did not finish"
        time.sleep(0.05)
    for reply in replies:
        assert reply.result().stop_reason == "end_turn", reply.result()
    for sid in sessions:
        runtime.close_session(sid)
    return peak, sinks


def test_thousand_sessions_constant_threads(tmp_path: Path) -> None:
    with loopback_server(rate=0.0) as server:
        registry = bench_registry()
        provider = build_provider(
            "anthropic", base_url=server.base_url, api_key="bench", max_retries=0
        )
        runtime = Runtime([ModelRoute(provider, "bench")], registry, RuntimeConfig(tool_workers=4))
        try:
            peak_small, _ = _run_sessions(runtime, 10, tmp_path)
            peak_large, sinks = _run_sessions(runtime, 1000, tmp_path)
        finally:
            runtime.shutdown()
    for sink in sinks:
        frames = sink.frames()
        check_cards(frames)
        cards = lifecycle(frames)
        assert cards and all(
            labels == ["preparing", "in_progress", "completed"] for labels in cards.values()
        )
    # Roles (5) + stream loop + timer + tool pool (4) + resolver pool (2): fixed, not per session.
    ceiling = 5 + 1 + 1 + 4 + 2
    assert peak_large <= ceiling, (peak_small, peak_large)
    # Every pool is started up front: a hundred times more sessions, not one thread more.
    assert peak_large == peak_small, (peak_small, peak_large)
