"""What one socket read of a provider stream costs before the runtime sees a byte.

Every provider event that reaches the runtime under load arrives in a read
of its own, so the cost of a read is a floor under the CPU per event that
no change to the runtime can go below. This measures that floor by itself,
in the same run for every configuration:

- a loopback server (its own process) keeps ``--connections`` chunked
  event streams open and writes one small SSE event to each ``--rate``
  times a second;
- each configuration runs in a fresh interpreter that opens every stream
  and counts what it reads, and reports the CPU it used per read:
  - reader ``protocol``: a bare ``asyncio.Protocol`` (no HTTP parsing at all),
  - reader ``aiohttp``: an aiohttp ``ClientSession``, the body read with
    ``iter_any``,
  - reader ``sdk``: the runtime's HTTP client, the SDK's aiohttp-based
    ``DefaultAioHttpClient``, with the runtime's timeouts, read with
    ``aiter_bytes`` as ``pump_sse`` does;
  - on asyncio's loop or on uvloop (``--loops``; uvloop needs the extra);
  - with glibc's default allocator settings or the agent's
    (``malloc_tuning``); the collector is tuned as the agent does in both.

``x protocol`` divides each figure by the bare protocol's on asyncio's loop
with default settings, measured in the same run.

Run: ``python -m benchmarks.read_floor [--connections 1000] [--rate 20] [--duration 8]``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeAlias, cast

from benchmarks import _harness as h
from toolprep.runtime.event_loops import new_stream_loop, uvloop_installed

READERS = ("protocol", "aiohttp", "sdk")
LOOPS = ("asyncio", "uvloop")
MALLOC = ("default", "tuned")

_EVENT = (
    b"event: content_block_delta\n"
    b'data: {"type":"content_block_delta","index":1,'
    b'"delta":{"type":"input_json_delta","partial_json":"{\\"path\\": \\"src/main"}}\n\n'
)
OpenStreams: TypeAlias = Callable[[], Awaitable[Callable[[], int]]]
"""Opens every stream on the running loop; returns how to read the count of reads so far."""

_CHUNK = b"%x\r\n%s\r\n" % (len(_EVENT), _EVENT)
_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


async def _serve(rate: float, seconds: float) -> None:
    """Stream ``_CHUNK`` at ``rate`` per connection for ``seconds``, then end each body."""

    async def stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return  # a client that went away before asking
        writer.write(_HEAD)
        period = 1.0 / rate
        await asyncio.sleep(random.random() * period)
        due = time.monotonic()
        end = due + seconds
        while due < end:
            writer.write(_CHUNK)
            due += period
            await asyncio.sleep(max(0.0, due - time.monotonic()))
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(stream, h.LOOPBACK, 0, backlog=4096)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await asyncio.sleep(seconds + 30)


_STREAMS: list[asyncio.Future[None]] = []
"""The reading tasks, kept referenced until the process ends."""


def _count_protocol(port: int, connections: int) -> OpenStreams:
    reads = [0]

    class Counting(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            # uvloop's transports do not derive from asyncio's classes.
            cast(asyncio.Transport, transport).write(b"GET / HTTP/1.1\r\nhost: bench\r\n\r\n")

        def data_received(self, data: bytes) -> None:
            reads[0] += 1

    async def open_all() -> Callable[[], int]:
        loop = asyncio.get_running_loop()
        for _ in range(connections):
            await loop.create_connection(Counting, h.LOOPBACK, port)
        return lambda: reads[0]

    return open_all


def _count_aiohttp(port: int, connections: int) -> OpenStreams:
    async def open_all() -> Callable[[], int]:
        import aiohttp

        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        reads = [0]

        async def one() -> None:
            async with session.get(f"http://{h.LOOPBACK}:{port}/") as response:
                async for _ in response.content.iter_any():
                    reads[0] += 1

        _STREAMS.extend(asyncio.ensure_future(one()) for _ in range(connections))
        return lambda: reads[0]

    return open_all


def _count_sdk(port: int, connections: int) -> OpenStreams:
    async def open_all() -> Callable[[], int]:
        import httpx2
        from anthropic import DefaultAioHttpClient

        from toolprep.runtime.providers.factory import DEFAULT_TIMEOUT

        limits = httpx2.Limits(max_connections=connections + 16)
        client = DefaultAioHttpClient(limits=limits)
        reads = [0]

        async def one() -> None:
            url = f"http://{h.LOOPBACK}:{port}/"
            async with client.stream("GET", url, timeout=DEFAULT_TIMEOUT) as response:
                async for _ in response.aiter_bytes():
                    reads[0] += 1

        _STREAMS.extend(asyncio.ensure_future(one()) for _ in range(connections))
        return lambda: reads[0]

    return open_all


_COUNTERS: dict[str, Callable[[int, int], OpenStreams]] = {
    "protocol": _count_protocol,
    "aiohttp": _count_aiohttp,
    "sdk": _count_sdk,
}


def _child(args: argparse.Namespace) -> None:
    """One configuration: open the streams, let them settle, measure a window, print JSON."""
    from toolprep.runtime.gc_tuning import tune_gc_for_daemon
    from toolprep.runtime.malloc_tuning import tune_malloc_for_daemon

    malloc_tuned = args.malloc == "tuned" and tune_malloc_for_daemon()
    tune_gc_for_daemon()
    loop = new_stream_loop(args.loop)
    open_all = _COUNTERS[args.reader](args.port, args.connections)

    async def measure() -> dict[str, Any]:
        reads = await open_all()
        await asyncio.sleep(args.settle)
        reads_before, cpu_before, started = reads(), time.process_time(), time.monotonic()
        await asyncio.sleep(args.window)
        elapsed = time.monotonic() - started
        count = reads() - reads_before
        cpu = time.process_time() - cpu_before
        return {
            "reads_per_s": count / elapsed,
            "cores": cpu / elapsed,
            "us_per_read": cpu / count * 1e6 if count else None,
            "malloc_tuned": malloc_tuned,
            "event_loop": h.loop_kind(asyncio.get_running_loop()),
        }

    print(json.dumps(loop.run_until_complete(measure())), flush=True)
    # The streams are abandoned with the process: nothing here outlives the measurement.


def _run(reader: str, loop: str, malloc: str, args: argparse.Namespace) -> dict[str, Any]:
    settle = args.settle
    total = settle + args.duration
    serve = [sys.executable, "-m", "benchmarks.read_floor", "--serve", str(args.rate)]
    with subprocess.Popen([*serve, str(total + 2)], stdout=subprocess.PIPE, text=True) as server:
        try:
            assert server.stdout is not None
            port = int(server.stdout.readline())
            command = [
                *(sys.executable, "-m", "benchmarks.read_floor", "--child"),
                *("--reader", reader, "--loop", loop, "--malloc", malloc),
                *("--port", str(port), "--connections", str(args.connections)),
                *("--settle", str(settle), "--window", str(args.duration)),
            ]
            result = subprocess.run(command, capture_output=True, text=True, timeout=total + 60)
        finally:
            server.kill()
    if result.returncode != 0:
        raise SystemExit(f"{reader}/{loop}/{malloc} failed:\n{result.stderr}")
    figures: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    return {"reader": reader, "loop": loop, "malloc": malloc, **figures}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=20.0, help="events/s per connection")
    parser.add_argument("--duration", type=float, default=8.0, help="measured seconds per run")
    parser.add_argument("--readers", default=",".join(READERS))
    parser.add_argument("--loops", default=",".join(LOOPS))
    parser.add_argument("--report", default=str(h.REPORTS / "read_floor.json"))
    parser.add_argument("--serve", nargs=2, type=float, help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--reader", choices=READERS, help=argparse.SUPPRESS)
    parser.add_argument("--loop", choices=LOOPS, help=argparse.SUPPRESS)
    parser.add_argument("--malloc", choices=MALLOC, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument(
        "--settle", type=float, default=2.0, help="seconds the streams run before measuring"
    )
    parser.add_argument("--window", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        asyncio.run(_serve(*args.serve))
        return 0
    if args.child:
        _child(args)
        return 0

    readers = [r for r in args.readers.split(",") if r]
    loops = [lp for lp in args.loops.split(",") if lp]
    if "uvloop" in loops and not uvloop_installed():
        print("uvloop is not installed (pip install 'toolprep[uvloop]'): asyncio only")
        loops = [lp for lp in loops if lp != "uvloop"]
    print(
        f"{args.connections} streams x {args.rate:g} events/s, {args.duration:g} s measured per run"
    )
    runs = []
    for reader, loop, malloc in itertools.product(readers, loops, MALLOC):
        runs.append(_run(reader, loop, malloc, args))
    baseline = next(
        (
            r["us_per_read"]
            for r in runs
            if (r["reader"], r["loop"], r["malloc"]) == ("protocol", "asyncio", "default")
        ),
        None,
    )
    print(f"{'reader':9} {'loop':8} {'malloc':8} {'reads/s':>8} {'us/read':>8} {'x protocol':>10}")
    for r in runs:
        ratio = r["us_per_read"] / baseline if baseline and r["us_per_read"] else None
        print(
            f"{r['reader']:9} {r['loop']:8} {r['malloc']:8} {r['reads_per_s']:8.0f} "
            f"{r['us_per_read'] or 0:8.1f} {'-' if ratio is None else f'{ratio:10.2f}':>10}"
        )
    h.write_report(
        Path(args.report),
        {"machine": h.machine_info(), "config": vars(args) | {"loops": loops}, "runs": runs},
    )
    print(f"report: {args.report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
