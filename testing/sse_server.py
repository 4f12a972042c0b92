"""A loopback provider for benchmarks and tests: realistic streamed turns at a set pace.

Runs as its own process (``python -m toolprep.testing.sse_server``) so its work is
not counted against the runtime being measured. One asyncio loop serves any
number of concurrent streams. Every POST gets a turn in the wire format of
the path (``/v1/messages`` Anthropic, ``/chat/completions`` OpenAI): when the
request's last message carries tool results the answer is text, otherwise
thinking, a sentence and 1-3 tool calls whose arguments are spread over many
fragments. Events are paced at ``--rate`` per second per stream.

``--stall`` makes every tool turn stop mid tool-call and hang (for the cancel
benchmark): the first tool call's opener and ``STALL_AFTER_FRAGMENTS``
argument fragments are sent, then nothing more until the client hangs up.
So the runtime has shown a preparing card that only a cancel can end.

``--tool read_file`` makes every tool call a ``read_file`` of ``BENCH_FILE``
instead of ``bench_tool``: an agent started as ``toolprep acp`` has only the
built-in tools, and that one needs no permission and costs next to nothing.
Its arguments come in as many fragments as ``bench_tool``'s would, so a turn
has the same number of events either way.

Each event's ``data`` has its send time (``time.time()``) in a field the
adapters ignore, and every tool-call id ends with ``_<time.time_ns()>`` taken
just before that event is written, so the runtime side can measure latency.
``GET /stats`` answers ``{"events_sent", "streams_started", "streams_open",
"streams_stalled"}``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import time
from collections.abc import Iterator

import orjson

__all__ = [
    "BENCH_FILE",
    "STALL_AFTER_FRAGMENTS",
    "TOOLS",
    "BenchServer",
    "anthropic_turn",
    "main",
    "openai_turn",
    "serve",
]

_counter = itertools.count(1)

STALL_AFTER_FRAGMENTS = 3
"""Argument fragments of the first tool call sent before a ``--stall`` stream hangs."""

TOOLS = ("bench_tool", "read_file")
"""What the tool calls name: the benchmarks' own no-op tool, or the built-in ``read_file``."""

BENCH_FILE = "bench.txt"
"""The file ``read_file`` calls read, relative to the session's working directory."""


def _fragments(text: str, size: int) -> Iterator[str]:
    for i in range(0, len(text), size):
        yield text[i : i + size]


def _tool_args(rng: random.Random) -> dict[str, object]:
    return {
        "path": f"src/module_{rng.randint(1, 999)}.py",
        "content": " ".join(rng.choice(("alpha", "beta", "gamma", "delta")) for _ in range(40)),
    }


def _argument_fragments(tool: str, rng: random.Random) -> list[str]:
    """One call's arguments in fragments; ``read_file``'s in as many as ``bench_tool``'s.

    ``bench_tool``'s arguments are drawn either way, so the random sequence
    (and with it the number of calls per turn) does not depend on the tool.
    """
    pieces = list(_fragments(orjson.dumps(_tool_args(rng)).decode(), 24))
    if tool == "bench_tool":
        return pieces
    text = orjson.dumps({"path": BENCH_FILE, "limit": 20}).decode()
    return list(_fragments(text, -(-len(text) // len(pieces))))


def anthropic_turn(
    with_tools: bool, rng: random.Random, tool: str = "bench_tool"
) -> Iterator[tuple[str, dict[str, object]]]:
    n = next(_counter)
    yield (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": f"msg_{n}",
                "type": "message",
                "role": "assistant",
                "model": "bench",
                "content": [],
                "stop_reason": None,
                "usage": {"input_tokens": 100, "output_tokens": 1},
            },
        },
    )
    index = 0
    if with_tools:
        yield (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "thinking", "thinking": ""},
            },
        )
        for word in ("Let", " me", " look", " at", " the", " files."):
            yield (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "thinking_delta", "thinking": word},
                },
            )
        yield (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "signature_delta", "signature": "c2ln"},
            },
        )
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
        index += 1
    yield (
        "content_block_start",
        {
            "type": "content_block_start",
            "index": index,
            "content_block": {"type": "text", "text": ""},
        },
    )
    for word in (
        ("I'll", " edit", " the", " files", " now.") if with_tools else ("All", " done", ".")
    ):
        yield (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "text_delta", "text": word},
            },
        )
    yield "content_block_stop", {"type": "content_block_stop", "index": index}
    index += 1
    if with_tools:
        for k in range(rng.randint(1, 3)):
            call_id = f"toolu_{n}_{k}_{time.time_ns()}"
            yield (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {
                        "type": "tool_use",
                        "id": call_id,
                        "name": tool,
                        "input": {},
                    },
                },
            )
            for piece in _argument_fragments(tool, rng):
                yield (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    },
                )
            yield "content_block_stop", {"type": "content_block_stop", "index": index}
            index += 1
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use" if with_tools else "end_turn"},
            "usage": {"output_tokens": 50},
        },
    )
    yield "message_stop", {"type": "message_stop"}


def openai_turn(
    with_tools: bool, rng: random.Random, tool: str = "bench_tool"
) -> Iterator[tuple[str, dict[str, object]]]:
    n = next(_counter)
    base = {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "bench",
    }

    def chunk(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    yield "", chunk({"role": "assistant", "content": ""})
    for word in (
        ("I'll", " edit", " the", " files", " now.") if with_tools else ("All", " done", ".")
    ):
        yield "", chunk({"content": word})
    if with_tools:
        for k in range(rng.randint(1, 3)):
            yield (
                "",
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": k,
                                "id": f"call_{n}_{k}_{time.time_ns()}",
                                "type": "function",
                                "function": {"name": tool, "arguments": ""},
                            }
                        ]
                    }
                ),
            )
            for piece in _argument_fragments(tool, rng):
                yield "", chunk({"tool_calls": [{"index": k, "function": {"arguments": piece}}]})
    yield "", chunk({}, "tool_calls" if with_tools else "stop")
    yield "", {**base, "choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 50}}


def _wants_tools(body: dict[str, object]) -> bool:
    messages = body.get("messages")
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


class BenchServer:
    def __init__(self, rate: float, stall: bool, seed: int = 7, tool: str = "bench_tool") -> None:
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self.stall = stall
        self.tool = tool
        self.rng = random.Random(seed)
        self.events_sent = 0
        self.streams_started = 0
        self.streams_open = 0
        self.streams_stalled = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                length = 0
                for line in lines[1:]:
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                body = orjson.loads(await reader.readexactly(length)) if length else {}
                if lines[0].startswith("GET /stats"):
                    stats = orjson.dumps(
                        {
                            "events_sent": self.events_sent,
                            "streams_started": self.streams_started,
                            "streams_open": self.streams_open,
                            "streams_stalled": self.streams_stalled,
                        }
                    )
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                        b"content-length: %d\r\n\r\n%s" % (len(stats), stats)
                    )
                    await writer.drain()
                    continue
                await self.stream(path, body, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stream(
        self, path: str, body: dict[str, object], writer: asyncio.StreamWriter
    ) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\ncache-control: no-cache\r\n\r\n"
        )
        with_tools = _wants_tools(body)
        anthropic = path.endswith("/messages")
        turn = anthropic_turn if anthropic else openai_turn
        events = turn(with_tools, self.rng, self.tool)
        self.streams_started += 1
        self.streams_open += 1
        try:
            await self._send_events(events, with_tools and self.stall, writer)
        finally:
            self.streams_open -= 1
        if not anthropic:
            payload = b"data: [DONE]\n\n"
            writer.write(b"%x\r\n%s\r\n" % (len(payload), payload))
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def _send_events(
        self,
        events: Iterator[tuple[str, dict[str, object]]],
        stall: bool,
        writer: asyncio.StreamWriter,
    ) -> None:
        fragments_after_opener: int | None = None
        for name, data in events:
            if stall:
                if fragments_after_opener is None and _opens_tool_call(data):
                    fragments_after_opener = -1  # this event is the opener itself
                if fragments_after_opener is not None:
                    if fragments_after_opener >= STALL_AFTER_FRAGMENTS:
                        self.streams_stalled += 1
                        try:
                            await asyncio.sleep(3600)
                        finally:
                            self.streams_stalled -= 1
                    fragments_after_opener += 1
            data["_sent"] = time.time()
            payload = (
                (f"event: {name}\n" if name else "").encode()
                + b"data: "
                + orjson.dumps(data)
                + b"\n\n"
            )
            writer.write(b"%x\r\n%s\r\n" % (len(payload), payload))
            await writer.drain()
            self.events_sent += 1
            if self.interval:
                await asyncio.sleep(self.interval)


def _opens_tool_call(data: dict[str, object]) -> bool:
    """True for the event that reveals a tool call's id and name (either wire format)."""
    block = data.get("content_block")
    if isinstance(block, dict) and block.get("type") == "tool_use":
        return True
    choices = data.get("choices")
    if isinstance(choices, list) and choices:
        delta = choices[0].get("delta") if isinstance(choices[0], dict) else None
        calls = delta.get("tool_calls") if isinstance(delta, dict) else None
        if isinstance(calls, list) and any(isinstance(c, dict) and c.get("id") for c in calls):
            return True
    return False


async def serve(port: int, rate: float, stall: bool, tool: str = "bench_tool") -> None:
    server = BenchServer(rate, stall, tool=tool)
    srv = await asyncio.start_server(server.handle, "127.0.0.1", port, backlog=4096)
    print(srv.sockets[0].getsockname()[1], flush=True)
    async with srv:
        await srv.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--stall", action="store_true")
    parser.add_argument("--tool", choices=TOOLS, default="bench_tool")
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.rate, args.stall, args.tool))


if __name__ == "__main__":
    main()
