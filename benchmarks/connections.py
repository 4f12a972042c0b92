"""How many connections ``toolprep serve`` holds, and what each costs.

Two measurements, each against a fresh daemon (``--no-persist``) started as
a subprocess, its soft open-files limit raised to the hard one:

1. ``--idle 1000,5000,10000``: that many connections, each past
   ``initialize``, held open; the daemon's resident memory per connection
   (RSS with them minus RSS before, over the count) and its thread count.
2. ``--active 2000``: that many connections at once, each running
   ``initialize``, ``session/new`` and one prompt against the loopback
   provider (``benchmarks.support.load_server``, a tool turn then a text turn):
   the share answered ``end_turn``, and first-frame latency (prompt sent ->
   first agent ``session/update`` read), p50 and p99.

The connections are driven by an asyncio client (the ``websockets`` asyncio
client, uvloop when installed) in a process of its own, so the client side
is not the limit; it raises its own open-files limit too. ``--baseline-python
PATH`` runs the same measurements against the ``toolprep`` installed in that
interpreter (a virtualenv of an earlier commit, say) and prints both side by
side with ratios (new / baseline).

    .venv/bin/python -m benchmarks.connections --idle 1000 --active 200 \\
        [--event-loops asyncio,uvloop] [--baseline-python /path/to/old/venv/bin/python]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from benchmarks import _harness as h
from benchmarks.support.loopback import BENCH_FILE
from toolprep.testing.daemon import serve_command

LISTENING = "serving ACP on "
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 120.0
CALL_TIMEOUT_S = 300.0
CONNECTING_AT_ONCE = 256


def raise_open_files_limit() -> tuple[int, int]:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


# --- the client process -----------------------------------------------------------------------


class _Peer:
    """One WebSocket connection speaking just enough ACP for the measurements."""

    def __init__(self, socket: Any) -> None:
        self.socket = socket
        self._ids = 0

    async def call(self, method: str, params: object) -> dict[str, Any]:
        self._ids += 1
        request_id = self._ids
        await self.socket.send(
            orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}),
            text=True,
        )
        while True:
            message = orjson.loads(await self.socket.recv(decode=False))
            if message.get("id") == request_id and "method" not in message:
                return dict(message)

    async def prompt(self, session_id: str) -> tuple[bool, int | None]:
        """(answered end_turn, ns from sending to the first agent update)."""
        self._ids += 1
        request_id = self._ids
        params = {"sessionId": session_id, "prompt": [{"type": "text", "text": "go"}]}
        sent = time.perf_counter_ns()
        await self.socket.send(
            orjson.dumps(
                {"jsonrpc": "2.0", "id": request_id, "method": "session/prompt", "params": params}
            ),
            text=True,
        )
        first: int | None = None
        while True:
            message = orjson.loads(await self.socket.recv(decode=False))
            if message.get("method") == "session/update":
                kind = message["params"]["update"].get("sessionUpdate")
                if first is None and kind != "user_message_chunk":
                    first = time.perf_counter_ns() - sent
            elif message.get("id") == request_id:
                result = message.get("result") or {}
                return result.get("stopReason") == "end_turn", first


async def _open(url: str, token: str, gate: asyncio.Semaphore) -> Any:
    from websockets.asyncio.client import connect

    async with gate:
        return await connect(
            url,
            additional_headers={"Authorization": f"Bearer {token}"},
            compression=None,
            max_size=None,
            open_timeout=CALL_TIMEOUT_S,
            ping_interval=None,
        )


async def _idle(url: str, token: str, count: int) -> None:
    gate = asyncio.Semaphore(CONNECTING_AT_ONCE)

    async def one() -> Any:
        socket = await _open(url, token, gate)
        reply = await _Peer(socket).call(
            "initialize", {"protocolVersion": 1, "clientCapabilities": {}}
        )
        if "result" not in reply:
            raise RuntimeError(f"initialize failed: {reply}")
        return socket

    outcomes = await asyncio.gather(*(one() for _ in range(count)), return_exceptions=True)
    sockets = [s for s in outcomes if not isinstance(s, BaseException)]
    errors = [repr(e)[:200] for e in outcomes if isinstance(e, BaseException)]
    opened = {"open": len(sockets), "failed": len(errors), "errors": errors[:3]}
    print(orjson.dumps(opened).decode(), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    await asyncio.gather(*(s.close() for s in sockets), return_exceptions=True)


async def _active(url: str, token: str, count: int, cwd: str) -> None:
    gate = asyncio.Semaphore(CONNECTING_AT_ONCE)

    async def one() -> tuple[bool, int | None]:
        socket = await _open(url, token, gate)
        try:
            peer = _Peer(socket)
            await peer.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            opened = await peer.call("session/new", {"cwd": cwd, "mcpServers": []})
            return await peer.prompt(opened["result"]["sessionId"])
        finally:
            await socket.close()

    started = time.monotonic()
    outcomes = await asyncio.gather(
        *(asyncio.wait_for(one(), CALL_TIMEOUT_S) for _ in range(count)), return_exceptions=True
    )
    answered = [o for o in outcomes if not isinstance(o, BaseException)]
    errors = [repr(e)[:200] for e in outcomes if isinstance(e, BaseException)]
    firsts = [first for ok, first in answered if ok and first is not None]
    report = {
        "ok": sum(1 for ok, _ in answered if ok),
        "count": count,
        "seconds": round(time.monotonic() - started, 1),
        "first_frame": h.summarize_ms(firsts),
        "errors": errors[:3],
    }
    print(orjson.dumps(report).decode(), flush=True)


def client_main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("idle", "active"))
    parser.add_argument("url")
    parser.add_argument("count", type=int)
    parser.add_argument("--cwd", default=".")
    args = parser.parse_args(argv)
    raise_open_files_limit()
    token = os.environ["TOOLPREP_TOKEN"]
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    if args.mode == "idle":
        asyncio.run(_idle(args.url, token, args.count))
    else:
        asyncio.run(_active(args.url, token, args.count, args.cwd))


# --- the daemon -------------------------------------------------------------------------------


@dataclass
class Daemon:
    process: subprocess.Popen[bytes]
    url: str
    stderr_path: Path

    def rss_kib(self) -> int:
        return h.rss_kib(self.process.pid)

    def threads(self) -> int:
        return h.os_threads(self.process.pid)


def _supports(python: str, option: str) -> bool:
    shown = subprocess.run(
        [python, "-m", "toolprep.runtime.cli", "serve", "--help"],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
        check=False,
    )
    return option in shown.stdout


@dataclass(frozen=True)
class Side:
    """One column of the table: an interpreter, and the daemon's ``--event-loop`` if given."""

    python: str
    event_loop: str | None = None


@contextmanager
def serve(
    side: Side, base_url: str, token: str, scratch: Path, workers: int, room: int
) -> Iterator[Daemon]:
    python = side.python
    command = serve_command(
        "anthropic",
        base_url,
        "--no-persist",
        "--model",
        "bench",
        "--workers",
        str(workers),
        python=python,
    )
    if _supports(python, "--max-connections"):
        command += ["--max-connections", str(room)]
    if side.event_loop is not None:
        command += ["--event-loop", side.event_loop]
    stderr_path = scratch / f"serve-{secrets.token_hex(4)}.stderr"
    env = {
        **os.environ,
        "ANTHROPIC_API_KEY": "bench",
        "TOOLPREP_TOKEN": token,
        "XDG_DATA_HOME": str(scratch / "data-home"),
    }
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            command,
            cwd=scratch,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            preexec_fn=raise_open_files_limit,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        url: str | None = None
        while url is None:
            text = stderr_path.read_text(errors="replace")
            if LISTENING in text:
                url = text.split(LISTENING, 1)[1].split()[0]
            elif process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"toolprep serve did not listen: {text[-2000:]}")
            else:
                time.sleep(0.05)
        yield Daemon(process, url, stderr_path)
    finally:
        h.stop_daemon(process, STOP_TIMEOUT_S)


def _client(mode: str, url: str, count: int, token: str, cwd: Path) -> subprocess.Popen[str]:
    command = ["-m", "benchmarks.connections", "--client", mode, url, str(count)]
    return subprocess.Popen(
        [sys.executable, *command, "--cwd", str(cwd)],
        cwd=h.REPO,
        env={**os.environ, "TOOLPREP_TOKEN": token},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def measure_idle(
    side: Side, base_url: str, count: int, scratch: Path, workers: int
) -> dict[str, Any]:
    token = secrets.token_urlsafe(32)
    with serve(side, base_url, token, scratch, workers, count + 100) as daemon:
        time.sleep(1.0)  # let start-up settle before the baseline reading
        rss_before, threads_before = daemon.rss_kib(), daemon.threads()
        client = _client("idle", daemon.url, count, token, scratch)
        assert client.stdout is not None and client.stdin is not None
        opened = orjson.loads(client.stdout.readline())
        time.sleep(1.0)
        rss_after, threads_after = daemon.rss_kib(), daemon.threads()
        client.stdin.write("close\n")
        client.stdin.flush()
        client.wait(STOP_TIMEOUT_S)
        client.stdin.close()
        client.stdout.close()
    held = max(1, int(opened["open"]))
    return {
        "open": opened["open"],
        "failed": opened["failed"],
        "rss_kib_per_connection": round((rss_after - rss_before) / held, 1),
        "threads_before": threads_before,
        "threads": threads_after,
        "errors": opened["errors"],
    }


def measure_active(
    side: Side, base_url: str, count: int, scratch: Path, workers: int
) -> dict[str, Any]:
    token = secrets.token_urlsafe(32)
    cwd = scratch / "work"
    cwd.mkdir(exist_ok=True)
    (cwd / BENCH_FILE).write_text("benchmark file\n")
    with serve(side, base_url, token, scratch, workers, count + 100) as daemon:
        client = _client("active", daemon.url, count, token, cwd)
        assert client.stdout is not None and client.stdin is not None
        peak_threads = daemon.threads()
        while client.poll() is None:
            with contextlib.suppress(OSError, KeyError):
                peak_threads = max(peak_threads, daemon.threads())
            time.sleep(0.2)
        report: dict[str, Any] = orjson.loads(client.stdout.read())
        client.stdin.close()
        client.stdout.close()
    report["peak_threads"] = peak_threads
    return report


# --- the table --------------------------------------------------------------------------------


def _rows(results: dict[str, dict[str, Any]]) -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    for name, result in results.items():
        if name.startswith("idle"):
            rows += [
                (f"{name}: connections held", result["open"]),
                (f"{name}: RSS KiB per connection", result["rss_kib_per_connection"]),
                (f"{name}: daemon threads", result["threads"]),
            ]
        else:
            rows += [
                (f"{name}: success %", round(100.0 * result["ok"] / result["count"], 2)),
                (f"{name}: first frame p50 ms", result["first_frame"]["p50"]),
                (f"{name}: first frame p99 ms", result["first_frame"]["p99"]),
                (f"{name}: peak threads", result["peak_threads"]),
                (f"{name}: wall s", result["seconds"]),
            ]
    return rows


def _ratio(new: Any, old: Any) -> str:
    if isinstance(new, (int, float)) and isinstance(old, (int, float)) and old:
        return f"{new / old:.3g}"
    return "-"


def print_table(sides: dict[str, dict[str, dict[str, Any]]]) -> None:
    names = list(sides)
    columns = {side: dict(_rows(results)) for side, results in sides.items()}
    labels = list(columns[names[0]])
    width = max(len(label) for label in labels) + 2
    newer = [n for n in names if n != "baseline"] if "baseline" in names else []
    header = f"{'':<{width}}" + "".join(f"{n:>16}" for n in names)
    header += "".join(f"{n + ' / base':>22}" for n in newer)
    print(header)
    for label in labels:
        values = [columns[n].get(label, "-") for n in names]
        line = f"{label:<{width}}" + "".join(f"{v!s:>16}" for v in values)
        base = columns["baseline"].get(label, "-") if newer else "-"
        line += "".join(f"{_ratio(columns[n].get(label, '-'), base):>22}" for n in newer)
        print(line)


def main(argv: Sequence[str] | None = None) -> None:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["--client"]:
        client_main(arguments[1:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--idle", default="1000", help="idle connection counts, comma-separated")
    parser.add_argument("--active", type=int, default=200, help="active connections (0: none)")
    parser.add_argument("--baseline-python", default=None, metavar="PATH")
    parser.add_argument("--workers", type=int, default=1, help="the daemon's --workers")
    parser.add_argument(
        "--event-loops",
        default="",
        help="the new side's --event-loop values, comma-separated, one column each "
        "(default: the daemon's own default)",
    )
    args = parser.parse_args(arguments)
    soft, hard = raise_open_files_limit()
    print(f"open files limit (soft/hard) for client and daemon: {soft}/{hard}")
    print(f"machine: {h.machine_info()}")
    loops = [loop for loop in args.event_loops.split(",") if loop]
    interpreters = {f"new {loop}": Side(sys.executable, loop) for loop in loops} or {
        "new": Side(sys.executable)
    }
    if args.baseline_python:
        interpreters["baseline"] = Side(args.baseline_python)
    sides: dict[str, dict[str, dict[str, Any]]] = {}
    with h.loopback_server(0.0, tool="read_file") as provider:
        for side, spec in interpreters.items():
            results: dict[str, dict[str, Any]] = {}
            for count in (int(c) for c in args.idle.split(",") if c):
                with tempfile.TemporaryDirectory() as scratch:
                    results[f"idle {count}"] = measure_idle(
                        spec, provider.base_url, count, Path(scratch), args.workers
                    )
                print(side, f"idle {count}", orjson.dumps(results[f"idle {count}"]).decode())
            if args.active:
                with tempfile.TemporaryDirectory() as scratch:
                    name = f"active {args.active}"
                    results[name] = measure_active(
                        spec, provider.base_url, args.active, Path(scratch), args.workers
                    )
                print(side, name, orjson.dumps(results[name]).decode())
            sides[side] = results
    print_table(sides)


if __name__ == "__main__":
    main()
