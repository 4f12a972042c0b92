"""How far the runtime's CPU per provider event is from the floor, measured in one run.

At N sessions x ``--rate`` events/s on one wire, each variant in a fresh
process against a fresh loopback provider, on the loop the runtime streams on
(uvloop when installed):

- ``socket``: an asyncio protocol per session that writes the POST itself and
  throws the answer's bytes away, parsing nothing: what reading the events
  costs on this loop with no HTTP client at all;
- ``aiohttp``: the provider's own aiohttp session (``DirectPost``: one POST,
  then ``readany`` to the end of the body), decoding nothing: the floor of the
  transport the runtime reads with;
- ``provider``: ``Provider.stream`` to its end, SSE decoding, the adapter and
  the read deadline included, with nothing after it;
- ``runtime``: the whole runtime (``benchmarks.load``'s embedded scenario:
  stream loop, tracker, emitter, executor, supervisor and the ACP connection).

Each figure is CPU per event the provider sent: the process's CPU over the
window for the first three, the runtime's share (``load``'s ``us/ev``) for the
last. Every request of a session alternates, as the runtime's do, between a
prompt (answered with thinking, text and tool calls) and tool results
(answered with text), so all four see the same mix of events and requests.
Each row is also printed as a multiple of ``socket`` and of ``aiohttp``.

Run: ``python -m benchmarks.stream_floor [--sessions 1000] [--provider anthropic,openai]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Coroutine
from typing import Any, cast

from benchmarks import _harness as h
from benchmarks import load
from benchmarks.support.loopback import LOOPBACK, loopback_server, server_stats
from toolprep.messages.content import (
    Content,
    FunctionCall,
    FunctionCallPart,
    FunctionResponse,
    FunctionResponsePart,
    TextPart,
)
from toolprep.messages.requests import ModelRequest
from toolprep.runtime.kernel.event_loops import new_stream_loop
from toolprep.runtime.providers.factory import build_provider

VARIANTS = ("socket", "aiohttp", "provider", "runtime")
_WARMUP_S = 6.0

PROMPT = (Content("user", (TextPart("edit the files"),)),)
TOOL_RESULTS = (
    *PROMPT,
    Content("model", (FunctionCallPart(FunctionCall("call_1", "bench_tool", {"path": "a"})),)),
    Content("user", (FunctionResponsePart(FunctionResponse("call_1", "bench_tool", {"ok": 1})),)),
)
"""The two requests a session alternates between: one answered with tool calls, one with text."""


def _requests() -> tuple[ModelRequest, ModelRequest]:
    return ModelRequest("bench", PROMPT), ModelRequest("bench", TOOL_RESULTS)


class _RawStream(asyncio.Protocol):
    """One keep-alive connection sending ``heads`` (whole requests) in turn, reading each
    chunked answer to its last chunk and nothing more."""

    def __init__(self, heads: tuple[bytes, bytes], on_lost: asyncio.Future[None]) -> None:
        self._heads = heads
        self._turn = 0
        self._on_lost = on_lost
        self._transport: asyncio.WriteTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not derive from asyncio's classes, only behave like them
        self._transport = cast(asyncio.WriteTransport, transport)
        self._post()

    def _post(self) -> None:
        assert self._transport is not None
        self._transport.write(self._heads[self._turn % 2])
        self._turn += 1

    def data_received(self, data: bytes) -> None:
        if data.endswith(b"\r\n0\r\n\r\n") or data == b"0\r\n\r\n":
            self._post()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._on_lost.done():
            self._on_lost.set_result(None)


def _raw_heads(wire: str, port: int) -> tuple[bytes, bytes]:
    """Both requests as bytes on the wire, to the path and with the bodies the provider
    itself would send."""
    provider: Any = _provider(wire, port)
    path = urllib.parse.urlsplit(provider.direct_post.url).path.encode("ascii")
    heads = []
    for request in _requests():
        body = provider.request_body(request)
        heads.append(
            b"POST %s HTTP/1.1\r\nhost: %s:%d\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (path, LOOPBACK.encode(), port, len(body), body)
        )
    return heads[0], heads[1]


async def _socket_sessions(wire: str, port: int, sessions: int) -> None:
    loop = asyncio.get_running_loop()
    heads = _raw_heads(wire, port)
    lost = loop.create_future()
    for _ in range(sessions):
        await loop.create_connection(lambda: _RawStream(heads, lost), LOOPBACK, port)
    await lost


async def _aiohttp_sessions(wire: str, port: int, sessions: int) -> None:
    provider: Any = _provider(wire, port)
    post = provider.direct_post
    bodies = [provider.request_body(request) for request in _requests()]

    async def session() -> None:
        turn = 0
        while True:
            reply = await post.open(bodies[turn % 2])
            turn += 1
            try:
                while await reply.read():
                    pass
            finally:
                await reply.close()

    await asyncio.gather(*(session() for _ in range(sessions)))


async def _provider_sessions(wire: str, port: int, sessions: int) -> None:
    provider: Any = _provider(wire, port)
    requests = _requests()

    async def session() -> None:
        turn = 0
        while True:
            async for _chunk in provider.stream(requests[turn % 2]):
                pass
            turn += 1

    await asyncio.gather(*(session() for _ in range(sessions)))


def _provider(wire: str, port: int) -> Any:
    base = f"http://{LOOPBACK}:{port}" + ("" if wire == "anthropic" else "/v1")
    return build_provider(wire, base_url=base, api_key="bench", max_retries=0)


_CHILDREN: dict[str, Callable[[str, int, int], Coroutine[Any, Any, None]]] = {
    "socket": _socket_sessions,
    "aiohttp": _aiohttp_sessions,
    "provider": _provider_sessions,
}


def run_child(variant: str, wire: str, port: int, sessions: int, duration: float) -> None:
    """In the child: stream until the window has been measured, then print its figures."""
    loop = new_stream_loop("auto")

    async def measure() -> dict[str, Any]:
        task = asyncio.create_task(_CHILDREN[variant](wire, port, sessions))
        await asyncio.sleep(_WARMUP_S)
        sent, cpu, at = server_stats(port)["events_sent"], time.process_time(), time.monotonic()
        await asyncio.sleep(duration)
        sent = server_stats(port)["events_sent"] - sent
        cpu, seconds = time.process_time() - cpu, time.monotonic() - at
        task.cancel()
        if not sent:
            raise RuntimeError(f"{variant}: the provider sent no event in {seconds:.1f} s")
        return {
            "events_per_s": round(sent / seconds, 1),
            "per_event_us": round(cpu / sent * 1e6, 2),
            "cores": round(cpu / seconds, 3),
            "event_loop": h.loop_kind(loop),
        }

    print(json.dumps(loop.run_until_complete(measure())))


def _spawn(variant: str, wire: str, sessions: int, rate: float, duration: float) -> dict[str, Any]:
    with loopback_server(rate) as server:
        command = [
            sys.executable,
            "-m",
            "benchmarks.stream_floor",
            "--child",
            variant,
            "--provider",
            wire,
            "--port",
            str(server.port),
            "--sessions",
            str(sessions),
            "--duration",
            str(duration),
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=h.REPO)
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def _runtime(wire: str, sessions: int, rate: float, duration: float) -> dict[str, Any]:
    argv = ["--sessions", str(sessions), "--provider", wire, "--rate", str(rate)]
    options = load.parse_options([*argv, "--duration", str(duration), "--wait-quiet", "0"])
    (run,) = load.run_all(options)
    return {
        "events_per_s": run["events_per_s"],
        "per_event_us": run["cpu"]["per_event_us"],
        "cores": run["cpu"]["runtime_cores"],
        "event_loop": run["event_loop"],
    }


def _times(value: float | None, floor: float | None) -> str:
    return f"{value / floor:6.2f}" if value and floor else "     -"


_HEADER = (
    f"{'variant':10} {'events/s':>9} {'us/ev':>7} {'cores':>6} {'x socket':>9} {'x aiohttp':>10}"
)


def print_rows(title: str, rows: dict[str, dict[str, Any]]) -> None:
    """Each variant's figures, and each as a multiple of the two floors."""
    socket_us = rows.get("socket", {}).get("per_event_us")
    aiohttp_us = rows.get("aiohttp", {}).get("per_event_us")
    print(f"\n{title}\n{_HEADER}")
    for variant, row in rows.items():
        us = row["per_event_us"]
        print(
            f"{variant:10} {row['events_per_s']:9.0f} {us or 0:7.1f} {row['cores']:6.2f} "
            f"{_times(us, socket_us):>9} {_times(us, aiohttp_us):>10}"
        )
    print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--provider", default="anthropic,openai")
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--child", choices=tuple(_CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        run_child(args.child, args.provider, args.port, args.sessions, args.duration)
        return 0
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}: choose from {', '.join(VARIANTS)}")
    report: dict[str, Any] = {"machine": h.machine_info(), "sessions": args.sessions, "runs": {}}
    for wire in args.provider.split(","):
        rows: dict[str, dict[str, Any]] = {}
        for variant in variants:
            print(f"{wire} {variant} N={args.sessions}: running ...", flush=True)
            if variant == "runtime":
                rows[variant] = _runtime(wire, args.sessions, args.rate, args.duration)
            else:
                rows[variant] = _spawn(variant, wire, args.sessions, args.rate, args.duration)
        report["runs"][wire] = rows
        print_rows(f"{wire}, {args.sessions} sessions x {args.rate:g} events/s", rows)
    h.write_report(h.REPORTS / "stream_floor.json", report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
