"""The benchmarks' load generator: realistic streamed turns at a set pace.

Runs as its own process (``python -m benchmarks.support.load_server``) so its work is
not counted against the runtime being measured. It is the test kit's loopback provider
(``toolprep.testing.FakeProviderServer``) with a responder that writes every turn with the
kit's SSE builders, so the benchmarks and the tests speak one wire. Every POST gets a
turn in the wire format of the path (``/v1/messages`` Anthropic, ``/chat/completions``
OpenAI): when the request's last message carries tool results the answer is text,
otherwise thinking (Anthropic), a sentence and 1-3 tool calls whose arguments are spread
over many fragments. Events are paced at ``--rate`` per second per stream.

``--stall`` makes every tool turn stop mid tool-call and hang (for the cancel
benchmark): the first tool call's opener and ``STALL_AFTER_FRAGMENTS`` argument
fragments are sent, then nothing more until the client hangs up. So the runtime has
shown a preparing card that only a cancel can end.

A prompt that reads ``long reply: N x S`` is answered, unpaced and without tools, with a
text reply of ``N`` fragments of ``S`` characters each (``long_reply_prompt``): one session
producing far more than the others, for the fairness benchmark.

``--usage-from-size`` reports each request's input tokens as its body's bytes over four
(instead of a fixed 100), so a session's usage grows with its history the way a real
model's does and ``--context-window`` / ``--compact-at`` compact it when it gets long.

``--tool read_file`` makes every tool call a ``read_file`` of ``BENCH_FILE`` instead of
``bench_tool``: an agent started as ``toolprep acp`` has only the built-in tools, and that
one needs no permission and costs next to nothing. Its arguments come in about as many
fragments as ``bench_tool``'s, so a turn has about the same number of events either way.

Every tool-call id ends with ``_<time.time_ns()>`` taken just before the event that
carries it is written, so the runtime side can measure latency. ``GET /stats`` answers
the server's counters (``events_sent``, ``streams_started``, ``streams_open``,
``streams_stalled``).
"""

from __future__ import annotations

import argparse
import itertools
import random
import re
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, Literal

from benchmarks.support.loopback import BENCH_FILE
from toolprep.testing import (
    FakeProviderServer,
    RecordedRequest,
    ScriptedResponse,
    ToolCallSpec,
    anthropic_sse,
    openai_sse,
    split_sse_events,
)

__all__ = [
    "BENCH_FILE",
    "STALL_AFTER_FRAGMENTS",
    "TOOLS",
    "TurnMaker",
    "long_reply_prompt",
    "main",
]

STALL_AFTER_FRAGMENTS = 3
"""Argument fragments of the first tool call sent before a ``--stall`` stream hangs."""

TOOLS = ("bench_tool", "read_file")
"""What the tool calls name: the benchmarks' own no-op tool, or the built-in ``read_file``."""

BenchToolName = Literal["bench_tool", "read_file"]

TEXT_FRAGMENT = 5
"""Characters per text or thinking delta: about a word."""
ARGS_FRAGMENT = {"bench_tool": 24, "read_file": 3}
"""Characters per argument fragment: ``read_file``'s short arguments in about as many
fragments (about a dozen) as ``bench_tool``'s long ones."""

BYTES_PER_TOKEN = 4
"""What ``--usage-from-size`` takes a token to be: about what English text averages."""

_STAMP = "@SENT_NS@"
"""Stands in a tool-call id for the send time, written in just before the event leaves."""


_LONG_REPLY = re.compile(r"long reply: (\d+) x (\d+)")


def long_reply_prompt(fragments: int, size: int) -> str:
    """The prompt the server answers with ``fragments`` text fragments of ``size`` characters."""
    return f"long reply: {fragments} x {size}"


def _long_reply(body: Any) -> tuple[int, int] | None:
    """``(fragments, size)`` if the request's last message asks for a long reply."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return None
    found = _LONG_REPLY.search(str(messages[-1].get("content")))
    return (int(found.group(1)), int(found.group(2))) if found else None


def _long_reply_events(fragments: int, size: int, anthropic: bool) -> Iterator[bytes]:
    """The reply's events, made as they are sent: a million of them are not held at once."""
    fragment = ("lorem ipsum dolor sit amet " * (size // 27 + 1))[:size]
    builder = anthropic_sse if anthropic else openai_sse
    # One fragment's transcript: the events before the text, its one delta, the ones after.
    events = split_sse_events(builder(fragment, fragment_size=size))
    text_at = next(i for i, event in enumerate(events) if fragment.encode() in event)
    yield from events[:text_at]
    for _ in range(fragments):
        yield events[text_at]
    yield from events[text_at + 1 :]


def _tool_args(rng: random.Random) -> dict[str, object]:
    return {
        "path": f"src/module_{rng.randint(1, 999)}.py",
        "content": " ".join(rng.choice(("alpha", "beta", "gamma", "delta")) for _ in range(40)),
    }


def _wants_tools(body: Any) -> bool:
    """A tool turn unless the request's last message carries tool results."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not messages:
        return True
    last = messages[-1]
    if not isinstance(last, dict):
        return True
    if last.get("role") == "tool":
        return False
    content = last.get("content")
    return not (
        isinstance(content, list)
        and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    )


def _stall_point(events: Sequence[bytes], anthropic: bool) -> int:
    """The index of the first event not sent: the first tool call's opener (and, on the
    Anthropic wire, its empty first delta) and ``STALL_AFTER_FRAGMENTS`` fragments go out."""
    opener = b'"type":"tool_use"' if anthropic else b'"type":"function"'
    first = next(i for i, event in enumerate(events) if opener in event)
    return first + 1 + (1 if anthropic else 0) + STALL_AFTER_FRAGMENTS


class TurnMaker:
    """The responder: a realistic turn for each request, from one seeded random sequence."""

    def __init__(
        self,
        rate: float,
        stall: bool,
        seed: int = 7,
        tool: BenchToolName = "bench_tool",
        usage_from_size: bool = False,
    ) -> None:
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self.stall = stall
        self.tool = tool
        self.usage_from_size = usage_from_size
        self._rng = random.Random(seed)
        self._counter = itertools.count(1)
        self._lock = threading.Lock()  # handler threads share the random sequence

    def __call__(self, request: RecordedRequest) -> ScriptedResponse:
        anthropic = request.path.endswith("/messages")
        long_reply = _long_reply(request.body)
        if long_reply is not None:
            return ScriptedResponse(events=_long_reply_events(*long_reply, anthropic))
        with_tools = _wants_tools(request.body)
        with self._lock:
            n = next(self._counter)
            calls = self._calls(n, anthropic) if with_tools else []
        text = "I'll edit the files now." if with_tools else "All done."
        input_tokens = 100
        if self.usage_from_size:
            input_tokens = int(request.headers.get("content-length") or 0) // BYTES_PER_TOKEN
        if anthropic:
            transcript = anthropic_sse(
                text,
                calls,
                thinking="Let me look at the files." if with_tools else None,
                signature="c2ln",
                fragment_size=TEXT_FRAGMENT,
                args_fragment_size=ARGS_FRAGMENT[self.tool],
                message_id=f"msg_{n}",
                model="bench",
                input_tokens=input_tokens,
                output_tokens=50,
            )
        else:
            transcript = openai_sse(
                text,
                calls,
                fragment_size=TEXT_FRAGMENT,
                args_fragment_size=ARGS_FRAGMENT[self.tool],
                completion_id=f"chatcmpl-{n}",
                model="bench",
                prompt_tokens=input_tokens,
                completion_tokens=50,
            )
        events = split_sse_events(transcript)
        stall_after = _stall_point(events, anthropic) if with_tools and self.stall else None
        return ScriptedResponse(events=self._paced(events), stall_after=stall_after)

    def _calls(self, n: int, anthropic: bool) -> list[ToolCallSpec]:
        prefix = "toolu" if anthropic else "call"
        calls: list[ToolCallSpec] = []
        for k in range(self._rng.randint(1, 3)):
            # Drawn for either tool, so the random sequence (and with it the number of
            # calls per turn) does not depend on the tool.
            args = _tool_args(self._rng)
            if self.tool == "read_file":
                args = {"path": BENCH_FILE, "limit": 20}
            calls.append((f"{prefix}_{n}_{k}_{_STAMP}", self.tool, args))
        return calls

    def _paced(self, events: Sequence[bytes]) -> Iterator[bytes]:
        """The events one ``interval`` apart, each stamped as the server draws it to send."""
        stamp = _STAMP.encode()
        for n, event in enumerate(events):
            if n and self.interval:
                time.sleep(self.interval)
            yield event.replace(stamp, b"%d" % time.time_ns())


def main(argv: list[str] | None = None) -> None:
    """Serve on ``--port`` (0: a free one), print the port as the first line, run until killed."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--stall", action="store_true")
    parser.add_argument("--tool", choices=TOOLS, default="bench_tool")
    parser.add_argument("--usage-from-size", action="store_true")
    args = parser.parse_args(argv)
    responder = TurnMaker(
        args.rate, args.stall, tool=args.tool, usage_from_size=args.usage_from_size
    )
    with FakeProviderServer(port=args.port, responder=responder, keep_requests=False) as server:
        print(server.base_url.rsplit(":", 1)[1], flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
