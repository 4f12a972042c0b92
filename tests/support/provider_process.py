"""The loopback provider in a process of its own, answering every request with a tool turn.

For a test that drives so many streams at once that a provider in the test process would
share its GIL with the runtime under test (``tests/runtime/test_many_sessions.py``): the
server's work stays out of the test process, as a real provider's does.
"""

from __future__ import annotations

import itertools
import multiprocessing
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection

from toolprep.testing import FakeProviderServer, RecordedRequest, ScriptedResponse, anthropic_sse

__all__ = ["TOOL_NAME", "provider_process", "tool_turn_then_answer"]

TOOL_NAME = "get_weather"
"""What the tool calls name (``RecordingTool``'s default)."""

START_TIMEOUT_S = 60.0

_call_ids = itertools.count(1)


def tool_turn_then_answer(request: RecordedRequest) -> ScriptedResponse:
    """Thinking and two weather calls for a prompt; a short answer to their results."""
    content = request.body["messages"][-1]["content"]
    if isinstance(content, list) and any(b.get("type") == "tool_result" for b in content):
        return ScriptedResponse(events=anthropic_sse("All done."))
    calls = [(f"toolu_{next(_call_ids)}", TOOL_NAME, {"city": city}) for city in ("Oslo", "Rome")]
    return ScriptedResponse(events=anthropic_sse("Checking.", calls, thinking="Two cities."))


def _serve(report: Connection) -> None:
    with FakeProviderServer(responder=tool_turn_then_answer, keep_requests=False) as server:
        report.send(server.base_url)
        report.close()
        threading.Event().wait()


@contextmanager
def provider_process() -> Iterator[str]:
    """Start the provider process, yield its base URL once it listens, always stop it."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_serve, args=(send,), name="loopback-provider", daemon=True)
    process.start()
    send.close()
    try:
        if not receive.poll(START_TIMEOUT_S):
            raise RuntimeError(f"the provider process did not start in {START_TIMEOUT_S:.0f} s")
        base_url: str = receive.recv()
        yield base_url
    finally:
        receive.close()
        process.terminate()
        process.join(10)
        if process.is_alive():
            process.kill()
            process.join(10)
        process.close()
