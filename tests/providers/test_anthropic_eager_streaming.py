"""Fine-grained (eager) tool input streaming on Anthropic, through the real runtime.

Requests: every tool carries ``eager_input_streaming: true`` unless the provider is
built with it off, and then the field is absent (an Anthropic-compatible server may
reject it). Responses: the recorded transcripts shaped like eager input (many small
``input_json_delta`` fragments, served paced so they arrive over time) and like
buffered input (the whole input in one fragment at the end) give the same card
lifecycle and the same arguments. Eager input is not validated by the API, so a
response cut by ``max_tokens`` ends mid-value: that call never runs, its card is
discarded and the turn stops at ``max_tokens`` without a retry.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import pytest

from tests.providers.helpers import FIXTURES, anthropic_provider, collect
from tests.support.runtime_harness import (
    Harness,
    RecordingSink,
    RecordingTool,
    check_cards,
    is_preparing,
    lifecycle,
    tool_frames,
)
from toolprep.messages.content import Content, TextPart
from toolprep.runtime.hosting.runtime import Runtime, RuntimeConfig
from toolprep.runtime.kernel.retry import RetryPolicy
from toolprep.runtime.providers.anthropic_provider import AnthropicProvider
from toolprep.runtime.providers.base import ModelRequest
from toolprep.runtime.providers.factory import DEFAULT_TIMEOUT, build_provider
from toolprep.runtime.providers.routes import ModelRoute
from toolprep.runtime.tools.registry import default_registry
from toolprep.testing import FakeProviderServer, ScriptedResponse, anthropic_sse

GREET_PY = (
    '"""Greeting helpers."""\n'
    "\n"
    "\n"
    "def greet(name: str) -> str:\n"
    '    """Say hello to \\"name\\" \u2192 politely."""\n'
    '    return f"Hello, {name}!"\n'
    "\n"
    "\n"
    "def farewell(name: str) -> str:\n"
    '\treturn f"Goodbye, {name}.\\n"\n'
)
"""The file every ``write_file`` transcript here writes (escapes, a tab, non-ASCII)."""

GREET_ARGS: dict[str, Any] = {"path": "src/greet.py", "content": GREET_PY}

EAGER = "anthropic-synthetic-eager-input-write-file.sse"
BUFFERED = "anthropic-synthetic-buffered-input-write-file.sse"
CUT = "anthropic-synthetic-eager-input-cut-by-max-tokens.sse"

PACE_S = 0.01
"""Between events of a served transcript: the eager fragments arrive over ~0.4 s."""


class TimedSink(RecordingSink):
    """A ``RecordingSink`` that also notes when each update arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def send_update(self, session_id: str, update: dict[str, Any]) -> None:
        with self.lock:
            self.times.append(time.monotonic())
        super().send_update(session_id, update)

    def time_of(self, pick: Any) -> float:
        with self.lock:
            for (_, update), at in zip(self.events, self.times, strict=False):
                if pick(update):
                    return at
        raise AssertionError("no such update")


@contextmanager
def anthropic_runtime(tmp_path: Path, *, eager_input_streaming: bool = True) -> Iterator[Harness]:
    """The runtime on the loopback server, over an ``AnthropicProvider`` built here.

    ``build_provider`` (what the harness uses) keeps the default, eager on; the off
    switch is a constructor argument, so this builds the provider the same way by hand.
    """
    with FakeProviderServer() as server:
        client = anthropic.AsyncAnthropic(
            api_key="test-key",
            base_url=server.base_url,
            max_retries=0,
            timeout=DEFAULT_TIMEOUT,
            http_client=anthropic.DefaultAioHttpClient(),
        )
        provider = AnthropicProvider(client, eager_input_streaming=eager_input_streaming)
        tool = RecordingTool()
        registry = default_registry()
        registry.register(tool, replace=True)
        config = RuntimeConfig(
            retry=RetryPolicy(max_retries=2, base_delay=0.01, jitter=0.0, max_delay=0.05),
            tool_timeout=10.0,
        )
        runtime = Runtime([ModelRoute(provider, "model-a")], registry, config)
        try:
            yield Harness("anthropic", server, runtime, tool, tmp_path)
        finally:
            runtime.shutdown(timeout=5)


def _fixture(name: str, **kw: Any) -> ScriptedResponse:
    return ScriptedResponse.from_fixture(FIXTURES / name, **kw)


def _without_eager(body: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(body)
    out["tools"] = [
        {k: v for k, v in t.items() if k != "eager_input_streaming"} for t in body["tools"]
    ]
    return out


# --- requests ----------------------------------------------------------------------------


def test_every_tool_asks_for_eager_input_by_default(tmp_path: Path) -> None:
    """The production build (``build_provider``) sends the per-tool field, and no beta header."""
    with FakeProviderServer() as server:
        provider = build_provider(
            "anthropic", base_url=server.base_url, api_key="test-key", max_retries=0
        )
        assert isinstance(provider, AnthropicProvider) and provider.eager_input_streaming
    with anthropic_runtime(tmp_path) as h:
        h.server.enqueue(ScriptedResponse(anthropic_sse(text="Hi.")))
        sid, sink = h.session()
        assert h.turn(sid, sink).stop_reason == "end_turn"
        (request,) = h.server.requests
    tools = request.body["tools"]
    assert len(tools) >= 5  # the built-in tools plus the recording one
    assert all(t["eager_input_streaming"] is True for t in tools)
    assert "anthropic-beta" not in request.headers


def test_switched_off_the_field_is_left_out_and_nothing_else_changes(tmp_path: Path) -> None:
    bodies = []
    for eager in (True, False):
        with anthropic_runtime(tmp_path, eager_input_streaming=eager) as h:
            h.server.enqueue(ScriptedResponse(anthropic_sse(text="Hi.")))
            sid, sink = h.session()
            assert h.turn(sid, sink).stop_reason == "end_turn"
            (request,) = h.server.requests
        assert "anthropic-beta" not in request.headers
        bodies.append(request.body)
    on, off = bodies
    assert off["tools"] and all("eager_input_streaming" not in t for t in off["tools"])
    assert _without_eager(on) == off


def test_a_request_without_tools_has_no_field() -> None:
    with FakeProviderServer() as server:
        server.enqueue(ScriptedResponse(anthropic_sse(text="Hi.")))
        request = ModelRequest(model="m", history=(Content("user", (TextPart("hi"),)),))
        _, error = collect(anthropic_provider(server.base_url), request)
        assert error is None
        (received,) = server.requests
    assert "tools" not in received.body
    assert "eager_input_streaming" not in json.dumps(received.body)


# --- responses ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "eager"),
    [(EAGER, True), (BUFFERED, True), (BUFFERED, False)],
    ids=["eager-fragments", "buffered-input", "buffered-input-switched-off"],
)
def test_eager_and_buffered_input_give_the_same_call(
    fixture: str, eager: bool, tmp_path: Path
) -> None:
    call_id = "toolu_synthetic_W1" if fixture == EAGER else "toolu_synthetic_W2"
    with anthropic_runtime(tmp_path, eager_input_streaming=eager) as h:
        h.server.enqueue(
            _fixture(fixture, pace_s=PACE_S), ScriptedResponse(anthropic_sse(text="Written."))
        )
        sink = TimedSink()
        sid, _ = h.session(sink)
        result = h.turn(sid, sink)
        frames = sink.frames()
    check_cards(frames)
    assert result.stop_reason == "end_turn"
    assert lifecycle(frames) == {call_id: ["preparing", "in_progress", "completed"]}
    started = next(f for f in tool_frames(frames) if f.get("status") == "in_progress")
    assert started["rawInput"] == GREET_ARGS
    assert (tmp_path / "src" / "greet.py").read_text(encoding="utf-8") == GREET_PY
    if fixture == EAGER:
        # The card was up while the input was still arriving, not shown with it.
        fragments = (FIXTURES / EAGER).read_text().count('"partial_json"')
        shown = sink.time_of(is_preparing)
        running = sink.time_of(lambda u: u.get("status") == "in_progress")
        assert running - shown >= fragments * PACE_S / 4


def test_input_cut_by_max_tokens_never_runs_and_is_not_retried(tmp_path: Path) -> None:
    with anthropic_runtime(tmp_path) as h:
        h.server.enqueue(_fixture(CUT, pace_s=PACE_S))
        sid, sink = h.session()
        result = h.turn(sid, sink)
        frames = sink.frames()
        assert len(h.server.requests) == 1  # a retry would only be cut at the limit again
        h.server.enqueue(ScriptedResponse(anthropic_sse(text="Shorter then.")))
        assert h.turn(sid, sink, "go on").stop_reason == "end_turn"
        follow_up = h.server.requests[1].body["messages"]
    check_cards(frames)
    assert result.stop_reason == "max_tokens"
    assert lifecycle(frames) == {"toolu_synthetic_W3": ["preparing", "discarded"]}
    assert h.tool.executed == [] and not (tmp_path / "src").exists()
    # History keeps the text the model wrote before the call; the cut call is not in it.
    blocks = [b for m in follow_up for b in m["content"]]
    assert {"type": "text", "text": "I'll write the module."} in blocks
    assert all(b["type"] not in ("tool_use", "tool_result") for b in blocks)


def test_input_cut_without_max_tokens_fails_the_attempt_and_is_retried(tmp_path: Path) -> None:
    """Invalid input under any other stop reason stays what it was: malformed, retryable."""
    cut = (FIXTURES / CUT).read_text().replace('"max_tokens"', '"tool_use"')
    with anthropic_runtime(tmp_path) as h:
        h.server.enqueue(
            ScriptedResponse(cut),
            _fixture(BUFFERED),
            ScriptedResponse(anthropic_sse(text="Written.")),
        )
        sid, sink = h.session()
        result = h.turn(sid, sink)
        frames = sink.frames()
        requests = h.server.requests
    check_cards(frames)
    assert result.stop_reason == "end_turn"
    assert lifecycle(frames) == {
        "toolu_synthetic_W3": ["preparing", "discarded"],
        "toolu_synthetic_W2": ["preparing", "in_progress", "completed"],
    }
    assert len(requests) == 3
    assert (tmp_path / "src" / "greet.py").read_text(encoding="utf-8") == GREET_PY
