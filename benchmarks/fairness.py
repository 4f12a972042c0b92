"""One heavy session among many light ones: do the light ones keep their pace?

``--sessions`` light sessions loop short tool turns (``read_file`` calls, the provider paced
at ``--rate`` events/s per stream) over ``--connections`` WebSocket connections of
``toolprep serve --workers W`` with a data directory. The run is cut in windows of
``--window`` s: first a baseline with the light sessions only, then one window per heavy
variant, in which one more session, on a connection of its own that reads everything, asks
for long replies back to back (a fresh session each, so no history grows): many small
fragments (64K and 256K of 5 characters: a long answer token by token) or a few huge ones
(64 of 1 MiB). The provider sends them unpaced, as fast as the daemon reads.

Per window it prints the light sessions' turns/s and first-frame latency (prompt sent ->
the session's first ``session/update`` read), p50 and p99, each as a ratio to the baseline.
Targets (issue: fair shares): turns/s >= 0.9x and first-frame p99 <= 2x the baseline.

Run: ``python -m benchmarks.fairness [--sessions 50] [--window 20] [--workers 2]
[--variants 64000x5,256000x5,64x1048576]``.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import _harness as h
from benchmarks.serve.daemon import serve_daemon
from benchmarks.serve.ws_client import Line, WsLoadClient
from benchmarks.support.load_server import long_reply_prompt

DEFAULT_REPORT = h.REPORTS / "fairness.json"
HEAVY_TIMEOUT_S = 1800.0
DEFAULT_VARIANTS = "64000x5,256000x5,64x1048576"
TURNS_TARGET = 0.9
P99_TARGET = 2.0


class LightLoad:
    """Sessions that prompt again as soon as a turn is answered; what their clients saw."""

    def __init__(self, workdir: str) -> None:
        self.workdir = workdir
        self._lock = threading.Lock()
        self._sent_ns: dict[str, int] = {}
        self._clients: dict[str, WsLoadClient] = {}
        self._latencies_ns: list[int] = []
        self._turns = 0
        self._errors = 0
        self._running = True

    def on_update(self, session_id: str, _update: dict[str, Any], read_ns: int) -> None:
        with self._lock:
            sent = self._sent_ns.pop(session_id, None)
            if sent is not None:
                self._latencies_ns.append(read_ns - sent)

    def start(self, clients: list[WsLoadClient], count: int) -> None:
        for n in range(count):
            client = clients[n % len(clients)]
            reply = client.call("session/new", {"cwd": self.workdir, "mcpServers": []})
            session_id: str = reply["result"]["sessionId"]
            self._clients[session_id] = client
            self._prompt(session_id)

    def take(self) -> tuple[int, int, list[int]]:
        """Turns answered, failed prompts and first-frame latencies since the last take."""
        with self._lock:
            taken = (self._turns, self._errors, self._latencies_ns)
            self._turns, self._errors, self._latencies_ns = 0, 0, []
        return taken

    def stop(self) -> None:
        with self._lock:
            self._running = False

    def _prompt(self, session_id: str) -> None:
        def answered(response: Line, _read_ns: int) -> None:
            with self._lock:
                if "result" in response:
                    self._turns += 1
                else:
                    self._errors += 1
                again = self._running and "result" in response
            if again:
                self._prompt(session_id)

        with self._lock:
            self._sent_ns[session_id] = time.time_ns()
        params = {"sessionId": session_id, "prompt": [{"type": "text", "text": "go"}]}
        self._clients[session_id].request("session/prompt", params, answered)


class HeavySession:
    """Long replies back to back on a connection of their own, each in a fresh session."""

    def __init__(self, client: WsLoadClient, workdir: str, fragments: int, size: int) -> None:
        self._client = client
        self._workdir = workdir
        self._prompt = long_reply_prompt(fragments, size)
        self._stop = threading.Event()
        self.replies = 0
        self.failures: list[Line] = []
        self._thread = threading.Thread(target=self._run, name="heavy", daemon=True)

    def __enter__(self) -> HeavySession:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(HEAVY_TIMEOUT_S)

    def _run(self) -> None:
        while not self._stop.is_set():
            opened = self._client.call("session/new", {"cwd": self._workdir, "mcpServers": []})
            session_id = opened["result"]["sessionId"]
            params = {"sessionId": session_id, "prompt": [{"type": "text", "text": self._prompt}]}
            answer = self._client.call("session/prompt", params, HEAVY_TIMEOUT_S)
            if "result" in answer:
                self.replies += 1
            else:
                self.failures.append(answer)
                return


@dataclass(frozen=True)
class Window:
    label: str
    seconds: float
    turns: int
    errors: int
    latencies_ns: list[int]

    def figures(self) -> dict[str, Any]:
        latency = h.summarize_ms(self.latencies_ns)
        return {
            "label": self.label,
            "turns_per_s": round(self.turns / self.seconds, 2),
            "errors": self.errors,
            "first_frame_ms": latency,
        }


def _measure(load: LightLoad, label: str, seconds: float) -> Window:
    load.take()
    start = time.monotonic()
    time.sleep(seconds)
    turns, errors, latencies = load.take()
    return Window(label, time.monotonic() - start, turns, errors, latencies)


def _variants(text: str) -> list[tuple[int, int]]:
    pairs = []
    for item in text.split(","):
        fragments, size = item.lower().split("x")
        pairs.append((int(fragments), int(size)))
    return pairs


def _print(rows: list[dict[str, Any]]) -> None:
    base = rows[0]
    print(f"{'window':<22} {'turns/s':>8} {'x base':>7} {'p50 ms':>8} {'p99 ms':>8} {'x base':>7}")
    for row in rows:
        p50, p99 = row["first_frame_ms"].get("p50"), row["first_frame_ms"].get("p99")
        turns_ratio = row["turns_per_s"] / base["turns_per_s"] if base["turns_per_s"] else 0.0
        base_p99 = base["first_frame_ms"].get("p99")
        p99_ratio = p99 / base_p99 if p99 is not None and base_p99 else float("nan")
        row["turns_ratio"], row["p99_ratio"] = round(turns_ratio, 3), round(p99_ratio, 3)
        verdict = ""
        if row is not base:
            met = turns_ratio >= TURNS_TARGET and p99_ratio <= P99_TARGET
            verdict = "  met" if met else "  MISSED"
        print(
            f"{row['label']:<22} {row['turns_per_s']:>8.1f} {turns_ratio:>7.2f} "
            f"{p50 or 0:>8.1f} {p99 or 0:>8.1f} {p99_ratio:>7.2f}{verdict}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--connections", type=int, default=10)
    parser.add_argument("--window", type=float, default=20.0, help="seconds per window")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--rate", type=float, default=50.0, help="light events/s per stream")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--variants", default=DEFAULT_VARIANTS, help="FRAGMENTSxSIZE,...")
    parser.add_argument("--no-store", action="store_true", help="serve with --no-persist")
    parser.add_argument("--report", type=Path, default=DEFAULT_REPORT)
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    with ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="toolprep-fair-")))
        workdir = scratch / "work"
        workdir.mkdir()
        h.write_bench_file(workdir)
        server = stack.enter_context(h.loopback_server(args.rate, tool="read_file"))
        daemon = stack.enter_context(
            serve_daemon(
                "anthropic",
                server.base_url,
                args.workers,
                None if args.no_store else scratch / "data",
                scratch,
            )
        )
        load = LightLoad(str(workdir))
        clients = []
        for n in range(args.connections):
            client = WsLoadClient(daemon.url, daemon.token, load.on_update, name=f"light-{n}")
            stack.callback(client.close)
            client.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            clients.append(client)
        heavy_client = WsLoadClient(daemon.url, daemon.token, lambda *_: None, name="heavy")
        stack.callback(heavy_client.close)
        heavy_client.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        load.start(clients, args.sessions)
        time.sleep(args.warmup)
        rows.append(_measure(load, "light only", args.window).figures())
        for fragments, size in _variants(args.variants):
            label = f"+ {fragments} x {size} B"
            with HeavySession(heavy_client, str(workdir), fragments, size) as heavy:
                window = _measure(load, label, args.window)
            if heavy.failures:
                raise RuntimeError(f"a long reply failed: {heavy.failures[0]}")
            rows.append({**window.figures(), "heavy_replies": heavy.replies})
        load.stop()
    _print(rows)
    h.write_report(args.report, {"args": vars(args) | {"report": str(args.report)}, "rows": rows})
    print(f"report: {args.report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
