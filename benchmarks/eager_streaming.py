"""Eager (fine-grained) vs buffered tool input on Anthropic: when the editor sees the card.

One session asks for a long ``write_file`` call (``--content-kib`` of text) and
the model writes it at a fixed ``--token-rate``. A loopback provider, in a
process of its own, answers in the Anthropic wire format and decides the mode
from the request the way the API does, by the ``eager_input_streaming`` field
of the ``write_file`` tool:

- eager (the field is ``true``): every input token goes out as its own
  ``input_json_delta`` at the moment it is generated;
- buffered (no field): the input is held and sent as one ``input_json_delta``
  when its last token is generated.

In both modes the ``tool_use`` opener goes out when it is generated: the API's
buffering is of the tool's input (the docs speak of the time to the first
fragment of a large parameter), not of the block. The runtime is the real one
behind the ACP agent on two pipes, with the SDK provider built with the switch
on and off; an editor-side drain thread stamps each frame as it is read
(``time.time_ns()``, the server's clock too, same machine).

Per call it measures: response start (server) -> preparing card (editor);
preparing card -> ``in_progress`` (the call released to run); and input
complete (server sent the last input byte) -> ``in_progress``. The server's
pacing is a model of the two API behaviours; it cannot know how the real API
buffers, so these figures say what this runtime does with each shape of
stream, not how fast the API is.

Run: ``python -m benchmarks.eager_streaming [--content-kib 20] [--token-rate 1000]
[--turns 3] [--warmup 1] [--report path]``. Figures are printed and written to
``benchmarks/reports/eager_streaming.json``; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from benchmarks import _harness as h
from benchmarks.sse_server import _wants_tools

DEFAULT_REPORT = h.REPORTS / "eager_streaming.json"
MODES = ("eager", "buffered")
TOOL = "write_file"
FILE_PATH = "src/generated_module.py"

MODEL_NOTE = (
    "The loopback server's pacing models the two API behaviours (eager: each input token "
    "sent as it is generated; buffered: the whole input sent when its last token is "
    "generated; the tool_use opener sent when generated in both). It cannot know how the "
    "real API buffers: these figures are this runtime's handling of each stream shape."
)


# --- the provider process -------------------------------------------------------------------


def file_content(kib: float) -> str:
    """Deterministic Python-like text of about ``kib`` KiB, with quotes and newlines to escape."""
    target = int(kib * 1024)
    lines: list[str] = []
    size = 0
    for i in itertools.count():
        line = f'def handler_{i}(request):\n    return {{"id": {i}, "text": "value \\"{i}\\""}}\n\n'
        if size + len(line) > target and lines:
            break
        lines.append(line)
        size += len(line)
    return "".join(lines)


def _tokens(text: str, chars_per_token: int) -> list[str]:
    return [text[i : i + chars_per_token] for i in range(0, len(text), chars_per_token)]


def _event(name: str, data: Mapping[str, Any]) -> bytes:
    payload = b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _is_eager(body: Mapping[str, Any]) -> bool:
    """What the API looks at: the field on the called tool's own declaration."""
    tools = body.get("tools")
    if not isinstance(tools, list):
        return False
    return any(
        isinstance(t, dict) and t.get("name") == TOOL and t.get("eager_input_streaming") is True
        for t in tools
    )


class PacedServer:
    """Answers each model request with one long ``write_file`` call, paced at a token rate."""

    def __init__(self, content_kib: float, token_rate: float, chars_per_token: int) -> None:
        self.interval = 1.0 / token_rate
        self.input_tokens = _tokens(
            orjson.dumps({"path": FILE_PATH, "content": file_content(content_kib)}).decode(),
            chars_per_token,
        )
        self.text_tokens = ["I'll", " write", " the", " module", " now", "."]
        self.calls: dict[str, dict[str, Any]] = {}
        self.serial = itertools.count(1)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                length = 0
                for line in lines[1:]:
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                body = orjson.loads(await reader.readexactly(length)) if length else {}
                if lines[0].startswith("GET /calls"):
                    data = orjson.dumps(self.calls)
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                        b"content-length: %d\r\n\r\n%s" % (len(data), data)
                    )
                    await writer.drain()
                    continue
                await self.stream(body, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stream(self, body: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\ncache-control: no-cache\r\n\r\n"
        )
        n = next(self.serial)
        start = time.monotonic()
        start_ns = time.time_ns()
        slot = itertools.count(1)

        async def at_slot() -> None:
            """Wait until the next token's generation time (an absolute schedule: no drift)."""
            delay = start + next(slot) * self.interval - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)

        writer.write(
            _event(
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": f"msg_bench_{n}",
                        "type": "message",
                        "role": "assistant",
                        "model": "bench",
                        "content": [],
                        "stop_reason": None,
                        "usage": {"input_tokens": 100, "output_tokens": 1},
                    },
                },
            )
        )
        await writer.drain()
        with_tool = _wants_tools(body)
        text = self.text_tokens if with_tool else ["Written", "."]
        writer.write(
            _event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            )
        )
        for token in text:
            await at_slot()
            writer.write(
                _event(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": token},
                    },
                )
            )
            await writer.drain()
        writer.write(_event("content_block_stop", {"type": "content_block_stop", "index": 0}))
        if with_tool:
            await self._tool_block(n, _is_eager(body), start_ns, at_slot, writer)
        writer.write(
            _event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "tool_use" if with_tool else "end_turn"},
                    "usage": {"output_tokens": len(self.input_tokens) + len(text)},
                },
            )
        )
        writer.write(_event("message_stop", {"type": "message_stop"}))
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def _tool_block(
        self,
        n: int,
        eager: bool,
        start_ns: int,
        at_slot: Callable[[], Awaitable[None]],
        writer: asyncio.StreamWriter,
    ) -> None:
        call_id = f"toolu_{'eager' if eager else 'buffered'}_{n}"
        await at_slot()  # the model names the tool
        writer.write(
            _event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 1,
                    "content_block": {"type": "tool_use", "id": call_id, "name": TOOL, "input": {}},
                },
            )
        )
        await writer.drain()
        opener_ns = time.time_ns()
        first_input_ns = 0
        for k, token in enumerate(self.input_tokens):
            await at_slot()
            if not eager and k < len(self.input_tokens) - 1:
                continue  # generated, held back
            piece = token if eager else "".join(self.input_tokens)
            writer.write(
                _event(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": 1,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    },
                )
            )
            await writer.drain()
            first_input_ns = first_input_ns or time.time_ns()
        input_done_ns = time.time_ns()
        writer.write(_event("content_block_stop", {"type": "content_block_stop", "index": 1}))
        self.calls[call_id] = {
            "mode": "eager" if eager else "buffered",
            "start_ns": start_ns,
            "opener_ns": opener_ns,
            "first_input_ns": first_input_ns,
            "input_done_ns": input_done_ns,
            "input_events": len(self.input_tokens) if eager else 1,
        }


async def serve(content_kib: float, token_rate: float, chars_per_token: int) -> None:
    server = PacedServer(content_kib, token_rate, chars_per_token)
    srv = await asyncio.start_server(server.handle, h.LOOPBACK, 0)
    print(srv.sockets[0].getsockname()[1], flush=True)
    async with srv:
        await srv.serve_forever()


@dataclass
class Provider:
    process: subprocess.Popen[str]
    port: int

    @property
    def base_url(self) -> str:
        return f"http://{h.LOOPBACK}:{self.port}"

    def calls(self) -> dict[str, dict[str, Any]]:
        with urllib.request.urlopen(f"{self.base_url}/calls", timeout=10) as answer:
            calls: dict[str, dict[str, Any]] = orjson.loads(answer.read())
        return calls


@contextmanager
def paced_provider(
    content_kib: float, token_rate: float, chars_per_token: int
) -> Iterator[Provider]:
    """The paced server in its own process (its CPU and pacing are not the runtime's)."""
    command = [
        sys.executable,
        "-m",
        "benchmarks.eager_streaming",
        "--serve",
        f"--content-kib={content_kib}",
        f"--token-rate={token_rate}",
        f"--chars-per-token={chars_per_token}",
    ]
    with h.port_reporting_process(command, "the paced server") as (process, port):
        yield Provider(process, port)


# --- the runtime and the editor side --------------------------------------------------------


def run_mode(
    mode: str, provider: Provider, turns: int, workdir: Path, timeout_s: float
) -> tuple[dict[str, dict[str, int]], list[str]]:
    """``turns`` prompts on one session; frame read times per call id, and each stop reason."""
    import anthropic

    from toolprep.runtime.acp.agent import AcpAgent
    from toolprep.runtime.acp.jsonrpc import JsonRpcConnection
    from toolprep.runtime.config import ModelRoute
    from toolprep.runtime.host import Runtime
    from toolprep.runtime.providers.anthropic_provider import AnthropicProvider
    from toolprep.runtime.providers.factory import DEFAULT_TIMEOUT
    from toolprep.runtime.tools.registry import default_registry

    client_sdk = anthropic.AsyncAnthropic(
        api_key="bench",
        base_url=provider.base_url,
        max_retries=0,
        timeout=DEFAULT_TIMEOUT,
        http_client=anthropic.DefaultAioHttpClient(),
    )
    model = AnthropicProvider(client_sdk, eager_input_streaming=mode == "eager")
    runtime = Runtime([ModelRoute(model, "bench")], default_registry())
    pipes = h.make_pipes()
    connection = JsonRpcConnection(pipes.agent_in, pipes.agent_out)
    AcpAgent(runtime, connection)
    connection.start()
    seen: dict[str, dict[str, int]] = {}

    def on_update(session_id: str, update: dict[str, Any], read_ns: int) -> None:
        kind = update.get("sessionUpdate")
        if kind not in ("tool_call", "tool_call_update"):
            return
        stamps = seen.setdefault(str(update["toolCallId"]), {})
        meta = update.get("_meta") or {}
        if meta.get("preparationDiscarded"):
            stamps["discarded"] = read_ns
        elif kind == "tool_call" and meta.get("phase") == "preparing":
            stamps["preparing"] = read_ns
        elif update.get("status") in ("in_progress", "completed", "failed"):
            stamps.setdefault(str(update["status"]), read_ns)

    client = h.AcpClient(pipes.client_w, pipes.client_r, on_update)
    stops: list[str] = []
    try:
        client.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        session = client.call("session/new", {"cwd": str(workdir), "mcpServers": []})
        session_id = session["result"]["sessionId"]
        for _ in range(turns):
            reply = client.call(
                "session/prompt",
                {"sessionId": session_id, "prompt": [{"type": "text", "text": "write it"}]},
                timeout=timeout_s,
            )
            stops.append(str(reply["result"]["stopReason"]))
    finally:
        runtime.shutdown()
        # End the agent's input first: once its reader has seen EOF the pipe can be
        # closed (closing it under a blocked read is not safe, and leaving it open
        # leaks the file until garbage collection).
        client.close_input()
        input_done = connection.wait_closed(10)
        connection.close()
        client.wait_drained(10)
        if input_done:
            pipes.agent_in.close()
    return seen, stops


def _ms(ns: float) -> float:
    return round(ns / 1e6, 2)


def measure(
    content_kib: float,
    token_rate: float,
    chars_per_token: int,
    turns: int,
    warmup: int,
    timeout_s: float,
) -> dict[str, Any]:
    samples: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    stop_reasons: dict[str, list[str]] = {}
    with paced_provider(content_kib, token_rate, chars_per_token) as provider:
        foreign = h.ForeignLoad(provider.process.pid)
        for mode in MODES:
            with tempfile.TemporaryDirectory(prefix="toolprep-eager-") as workdir:
                frames, stop_reasons[mode] = run_mode(
                    mode, provider, warmup + turns, Path(workdir), timeout_s
                )
            server_calls = provider.calls()
            ordered = sorted(
                (c for c in frames if c in server_calls),
                key=lambda c: server_calls[c]["start_ns"],
            )
            for call_id in ordered[warmup:]:
                sent, read = server_calls[call_id], frames[call_id]
                if "preparing" not in read or "in_progress" not in read:
                    samples[mode].append({"call_id": call_id, "incomplete": read})
                    continue
                samples[mode].append(
                    {
                        "call_id": call_id,
                        "server_mode": sent["mode"],
                        "input_events": sent["input_events"],
                        "start_to_preparing_ms": _ms(read["preparing"] - sent["start_ns"]),
                        "preparing_to_in_progress_ms": _ms(read["in_progress"] - read["preparing"]),
                        "input_done_to_in_progress_ms": _ms(
                            read["in_progress"] - sent["input_done_ns"]
                        ),
                        "start_to_first_input_sent_ms": _ms(
                            sent["first_input_ns"] - sent["start_ns"]
                        ),
                    }
                )
        other_cores = foreign.cores()
    input_tokens = len(
        _tokens(
            orjson.dumps({"path": FILE_PATH, "content": file_content(content_kib)}).decode(),
            chars_per_token,
        )
    )
    return {
        "benchmark": "eager_streaming",
        "machine": h.machine_info(),
        "config": {
            "content_kib": content_kib,
            "token_rate": token_rate,
            "chars_per_token": chars_per_token,
            "input_tokens": input_tokens,
            "turns": turns,
            "warmup": warmup,
        },
        "model_note": MODEL_NOTE,
        "samples": samples,
        "medians": {mode: _medians(samples[mode]) for mode in MODES},
        "stop_reasons": stop_reasons,
        "other_processes_cores": other_cores,
    }


FIGURES = (
    ("start_to_preparing_ms", "response start -> preparing card"),
    ("preparing_to_in_progress_ms", "preparing card -> in_progress"),
    ("input_done_to_in_progress_ms", "input complete -> in_progress"),
    ("start_to_first_input_sent_ms", "first input byte sent (server)"),
)


def _medians(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    complete = [r for r in rows if "incomplete" not in r]
    return {
        key: round(statistics.median(r[key] for r in complete), 2) if complete else None
        for key, _ in FIGURES
    }


def table(report: Mapping[str, Any]) -> str:
    eager, buffered = report["medians"]["eager"], report["medians"]["buffered"]
    rows = [("figure (median ms)", "eager", "buffered", "buffered / eager")]
    for key, label in FIGURES:
        e, b = eager[key], buffered[key]
        ratio = f"{b / e:.2f}" if e and b is not None else "-"
        rows.append((label, f"{e}", f"{b}", ratio))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [
        "  ".join(
            cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)
        )
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--content-kib", type=float, default=20.0, help="write_file content")
    parser.add_argument("--token-rate", type=float, default=1000.0, help="tokens/s generated")
    parser.add_argument("--chars-per-token", type=int, default=4)
    parser.add_argument("--turns", type=int, default=3, help="measured calls per mode")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured calls per mode first")
    parser.add_argument("--timeout", type=float, default=300.0, help="per prompt, seconds")
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=60.0,
        help="first wait up to this many seconds for other processes to go idle",
    )
    parser.add_argument("--report", type=Path, default=DEFAULT_REPORT)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.token_rate <= 0 or args.chars_per_token < 1 or args.content_kib <= 0:
        parser.error("--token-rate, --chars-per-token and --content-kib must be positive")
    if args.serve:
        asyncio.run(serve(args.content_kib, args.token_rate, args.chars_per_token))
        return 0
    if args.turns < 1 or args.warmup < 0:
        parser.error("--turns must be positive and --warmup not negative")
    if args.wait_quiet > 0:
        h.wait_for_quiet(max_wait=args.wait_quiet)
    report = measure(
        args.content_kib,
        args.token_rate,
        args.chars_per_token,
        args.turns,
        args.warmup,
        args.timeout,
    )
    config = report["config"]
    print(
        f"one {TOOL} call of {config['content_kib']} KiB content "
        f"({config['input_tokens']} input tokens at {config['token_rate']:g} tokens/s), "
        f"{config['turns']} measured calls per mode after {config['warmup']} warm-up"
    )
    print(MODEL_NOTE)
    print()
    print(table(report))
    print()
    print(
        f"stop reasons: {report['stop_reasons']}; other processes used "
        f"{report['other_processes_cores']:.2f} cores meanwhile"
    )
    h.write_report(args.report, report)
    print(f"report: {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
