"""1000 sessions at once through one runtime, on a constant number of threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from tests.support.eventually import eventually
from tests.support.provider_process import provider_process
from tests.support.runtime_harness import RecordingSink, RecordingTool, check_cards, lifecycle
from toolprep.messages.content import TextPart
from toolprep.runtime.hosting.runtime import Runtime, RuntimeConfig
from toolprep.runtime.providers.factory import build_provider
from toolprep.runtime.providers.routes import ModelRoute
from toolprep.runtime.tools.registry import ToolRegistry

# The sessions of the whole test finish within this; the test's timeout adds room for the
# set-up before and the checks after (cheap: the schema check validates each distinct frame once).
DEADLINE_S = 240.0
TEST_TIMEOUT_S = DEADLINE_S + 90.0

RUNTIME_THREADS = (
    "toolprep-",
    "AcpEmitter",
    "ToolExecutor",
    "PreparationTracker",
    "StreamReader",
    "SessionSupervisor",
)


def _mark_turn_end(sink: RecordingSink, session_id: str) -> Callable[[Future[Any]], None]:
    return lambda _reply: sink.mark_turn_end(session_id)


class OwnedThreads:
    """Counts the runtime's threads: named as the runtime names them and started after
    the counter was made, so other tests' leftovers in this process are not counted."""

    def __init__(self) -> None:
        self.before = set(threading.enumerate())

    def count(self) -> int:
        return sum(
            t.name.startswith(RUNTIME_THREADS) and t not in self.before
            for t in threading.enumerate()
        )


def _run_sessions(
    runtime: Runtime, threads: OwnedThreads, count: int, cwd: Path, deadline: float
) -> tuple[int, list[RecordingSink]]:
    sinks = [RecordingSink() for _ in range(count)]
    sessions = [runtime.open_session(cwd, sink) for sink in sinks]
    peak = threads.count()
    replies = [runtime.prompt(sid, [TextPart("go")]) for sid in sessions]
    for sid, sink, reply in zip(sessions, sinks, replies, strict=False):
        reply.add_done_callback(_mark_turn_end(sink, sid))

    def finished() -> bool:
        nonlocal peak
        peak = max(peak, threads.count())  # sampled while they run
        return all(r.done() for r in replies)

    eventually(
        finished, timeout=deadline - time.monotonic(), interval=0.05, what="sessions did not finish"
    )
    for reply in replies:
        assert reply.result().stop_reason == "end_turn", reply.result()
    for sid in sessions:
        runtime.close_session(sid)
    return peak, sinks


@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_thousand_sessions_constant_threads(tmp_path: Path) -> None:
    with provider_process() as base_url:
        registry = ToolRegistry()
        registry.register(RecordingTool())
        provider = build_provider("anthropic", base_url=base_url, api_key="bench", max_retries=0)
        threads = OwnedThreads()
        runtime = Runtime([ModelRoute(provider, "bench")], registry, RuntimeConfig(tool_workers=4))
        at_start = threads.count()
        deadline = time.monotonic() + DEADLINE_S
        try:
            peak_small, _ = _run_sessions(runtime, threads, 10, tmp_path, deadline)
            peak_large, sinks = _run_sessions(runtime, threads, 1000, tmp_path, deadline)
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
    # Every thread exists once the constructor returns: a hundred times more sessions,
    # not one thread more.
    assert at_start == peak_small == peak_large, (at_start, peak_small, peak_large)
