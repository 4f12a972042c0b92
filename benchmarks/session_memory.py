"""What a session costs ``toolprep serve`` in memory: idle, active, and once evicted.

Two daemons (``--workers 2`` by default, a data directory, the loopback provider in its own
process), each measured against its own baseline taken after one warm-up turn:

- **idle**: ``--sessions`` sessions each run ``--turns`` turns to their end (unpaced
  provider, ``read_file`` calls), then sit with their client attached. RSS of the front and
  of the worker, minus the baseline, per session. Then every client hangs up and the daemon
  (``--idle-evict 1``) evicts the sessions; what is left over the baseline, per session, is
  memory the allocators kept, not sessions (``toolprep_sessions_live`` is read to be 0):
  a second batch of as many sessions, run and evicted alike, shows whether it is reused
  (its growth over the first batch's evicted reading, per session).
- **active**: as many sessions each with one turn in flight, held at its first tool card
  (``load_server --stall``), which is a session's peak: history, a provider stream, an
  open card and its frames. Per session over the baseline again.

Run: ``python -m benchmarks.session_memory [--sessions 200] [--turns 3] [--workers 2]``.
RSS is read from ``/proc`` (``VmRSS``) after a short settle; page granularity makes small N
meaningless.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks import _harness as h
from benchmarks.serve.daemon import Daemon, serve_daemon
from benchmarks.serve.ws_client import WsLoadClient

DEFAULT_REPORT = h.REPORTS / "session_memory.json"
SETTLE_S = 2.0
"""Quiet time before a reading, so freed memory and finished writes have settled."""
WAIT_S = 300.0
SESSIONS_PER_CONNECTION = 50


class _Turns:
    """Counts answered prompts and preparing cards across every connection."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self.answered = 0
        self.failed = 0
        self.preparing = 0

    def on_update(self, _session_id: str, update: dict[str, Any], _read_ns: int) -> None:
        if h.preparing_stamp_ns(update) is not None:
            with self._lock:
                self.preparing += 1
                self._lock.notify_all()

    def on_answer(self, response: dict[str, Any], _read_ns: int) -> None:
        with self._lock:
            self.answered += 1
            self.failed += "result" not in response
            self._lock.notify_all()

    def wait(self, done: Callable[[_Turns], bool], what: str) -> None:
        with self._lock:
            if not self._lock.wait_for(lambda: done(self), WAIT_S):
                raise RuntimeError(f"timed out waiting for {what}")


def _answered(goal: int) -> Callable[[_Turns], bool]:
    return lambda turns: turns.answered >= goal


def _prompt(client: WsLoadClient, session_id: str, turns: _Turns) -> None:
    params = {"sessionId": session_id, "prompt": [{"type": "text", "text": "go"}]}
    client.request("session/prompt", params, turns.on_answer)


def _rss(daemon: Daemon) -> dict[str, int]:
    time.sleep(SETTLE_S)
    return daemon.rss_split_kib()


def _per_session(after: dict[str, int], before: dict[str, int], n: int) -> dict[str, float]:
    return {part: round((after[part] - before[part]) / n, 1) for part in ("front", "workers")}


def _live_sessions(daemon: Daemon) -> float:
    request = urllib.request.Request(
        daemon.url.replace("ws://", "http://").removesuffix("/acp") + "/metrics",
        headers={"Authorization": f"Bearer {daemon.token}"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        page = response.read().decode()
    for line in page.splitlines():
        if line.startswith("toolprep_sessions_live"):
            return float(line.split()[-1])
    raise RuntimeError("/metrics has no toolprep_sessions_live")


def _wait_evicted(daemon: Daemon) -> None:
    deadline = time.monotonic() + WAIT_S
    while _live_sessions(daemon) > 0:
        if time.monotonic() > deadline:
            raise RuntimeError("the idle sessions were never evicted")
        time.sleep(0.5)


class _Run:
    """One daemon, its connections and the sessions opened on them."""

    def __init__(self, stack: ExitStack, daemon: Daemon, workdir: Path, sessions: int) -> None:
        self.daemon = daemon
        self.turns = _Turns()
        self.clients = [
            WsLoadClient(daemon.url, daemon.token, self.turns.on_update, name=f"mem-ws-{n}")
            for n in range(max(1, -(-sessions // SESSIONS_PER_CONNECTION)))
        ]
        for client in self.clients:
            stack.callback(client.close)
            client.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        self.workdir = workdir

    def open(self, count: int) -> list[tuple[WsLoadClient, str]]:
        opened = []
        for n in range(count):
            client = self.clients[n % len(self.clients)]
            reply = client.call("session/new", {"cwd": str(self.workdir), "mcpServers": []})
            opened.append((client, reply["result"]["sessionId"]))
        return opened

    def run_turns(self, sessions: list[tuple[WsLoadClient, str]], turns: int) -> None:
        for _ in range(turns):
            goal = self.turns.answered + len(sessions)
            for client, session_id in sessions:
                _prompt(client, session_id, self.turns)
            self.turns.wait(_answered(goal), "turns to end")

    def hang_up(self) -> None:
        for client in self.clients:
            client.close()


def _idle(args: argparse.Namespace, scratch: Path, workdir: Path) -> dict[str, Any]:
    with ExitStack() as stack:
        server = stack.enter_context(h.loopback_server(0, tool="read_file"))
        daemon = stack.enter_context(
            serve_daemon(
                "anthropic", server.base_url, args.workers, scratch / "idle-data", scratch,
                extra_options=("--idle-evict", "1"),
            )
        )  # fmt: skip
        run = _Run(stack, daemon, workdir, args.sessions)
        run.run_turns(run.open(1), 1)  # warm-up: imports, pools, the first session
        base = _rss(daemon)
        sessions = run.open(args.sessions)
        run.run_turns(sessions, args.turns)
        idle = _rss(daemon)
        run.hang_up()
        _wait_evicted(daemon)
        evicted = _rss(daemon)
        again = _Run(stack, daemon, workdir, args.sessions)  # as many new ones, evicted alike
        again.run_turns(again.open(args.sessions), args.turns)
        again.hang_up()
        _wait_evicted(daemon)
        reused = _rss(daemon)
        return {
            "baseline_kib": base,
            "idle_kib": idle,
            "evicted_kib": evicted,
            "second_batch_evicted_kib": reused,
            "idle_per_session_kib": _per_session(idle, base, args.sessions),
            "evicted_per_session_kib": _per_session(evicted, base, args.sessions),
            "second_batch_per_session_kib": _per_session(reused, evicted, args.sessions),
            "failed_turns": run.turns.failed + again.turns.failed,
        }


def _active(args: argparse.Namespace, scratch: Path, workdir: Path) -> dict[str, Any]:
    with ExitStack() as stack:
        server = stack.enter_context(h.loopback_server(0, stall=True, tool="read_file"))
        daemon = stack.enter_context(
            serve_daemon(
                "anthropic", server.base_url, args.workers, scratch / "active-data", scratch
            )
        )
        run = _Run(stack, daemon, workdir, args.sessions)
        [(client, warm)] = run.open(1)
        _prompt(client, warm, run.turns)  # warm-up: one turn held at its card, then cancelled
        run.turns.wait(lambda t: t.preparing >= 1, "the warm-up card")
        client.notify("session/cancel", {"sessionId": warm})
        run.turns.wait(lambda t: t.answered >= 1, "the warm-up cancel")
        base = _rss(daemon)
        sessions = run.open(args.sessions)
        for client, session_id in sessions:
            _prompt(client, session_id, run.turns)
        run.turns.wait(lambda t: t.preparing >= 1 + args.sessions, "every turn's first card")
        active = _rss(daemon)
        return {
            "baseline_kib": base,
            "active_kib": active,
            "active_per_session_kib": _per_session(active, base, args.sessions),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=3, help="finished turns per idle session")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (1: none)")
    parser.add_argument("--report", type=Path, default=DEFAULT_REPORT)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="toolprep-memory-") as tmp:
        scratch = Path(tmp)
        workdir = scratch / "work"
        workdir.mkdir()
        h.write_bench_file(workdir)
        idle = _idle(args, scratch, workdir)
        active = _active(args, scratch, workdir)
    report = {"sessions": args.sessions, "turns": args.turns, "idle": idle, "active": active}
    h.write_report(args.report, report)
    print(
        f"{args.sessions} sessions, --workers {args.workers}, KiB of RSS per session over the "
        "baseline (2nd batch: over the first batch's evicted reading)"
    )
    print("state     front  worker")
    for label, figures in (
        (f"idle ({args.turns} turns)", idle["idle_per_session_kib"]),
        ("active", active["active_per_session_kib"]),
        ("evicted", idle["evicted_per_session_kib"]),
        ("2nd batch, evicted", idle["second_batch_per_session_kib"]),
    ):
        print(f"{label:<16} {figures['front']:>8.1f} {figures['workers']:>8.1f}")
    print(f"failed turns: {idle['failed_turns']}; report: {args.report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
