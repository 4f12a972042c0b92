"""Pattern stall: does a long, hostile ``search`` delay the agent's other requests?

Starts the real agent (``python -m toolprep.runtime.cli acp``) over stdio with
a loopback provider that scripts one session's model to call ``search`` with
a nested-quantifier pattern over a generated tree: a long run of ``a`` then
``!`` (which a backtracking engine never finishes) and hard links of one
file of short lines (so the search itself runs for seconds). While the
search runs, the script writes a small JSON-RPC request (``session/new``)
every ``--interval-ms`` and measures each one's wait, from writing the
request to reading its response. The same probing with no search running
gives the baseline. Target: no request waits more than 50 ms behind a search.

Scenarios:

- ``idle``: probes alone (the baseline);
- ``search-blocks``: ``\\A(a+)+$``, matched a block of lines at a time, the
  path every pattern takes unless it turns multi-line mode off;
- ``search-lines``: ``(?-m)\\A(a+)+$``; the flag group keeps the search on the
  line-by-line path, the slowest one (a Python loop over every line).

Run: ``python -m benchmarks.pattern_stall [--lines 2000000] [--copies 40]
[--interval-ms 10] [--idle-s 3] [--report path]``. Figures are printed and
written to ``benchmarks/reports/pattern_stall.json``; nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from benchmarks import _harness as h
from tests.support.fake_provider import FakeProviderServer, ScriptedResponse, anthropic_sse

DEFAULT_REPORT = h.REPORTS / "pattern_stall.json"
TARGET_MAX_MS = 50.0
_SEARCH_CALL = "call_search_"  # + the scenario's name: call ids are unique within a session


@dataclass
class _Agent:
    """The agent process and a reader thread stamping when each response arrives."""

    process: subprocess.Popen[bytes]
    replies: dict[int, int] = field(default_factory=dict)  # request id -> read time (ns)
    results: dict[int, Any] = field(default_factory=dict)  # request id -> result
    statuses: list[tuple[int, str]] = field(default_factory=list)  # (ns, status) of the search
    changed: threading.Condition = field(default_factory=threading.Condition)
    next_id: int = 1
    write_lock: threading.Lock = field(default_factory=threading.Lock)

    def read_forever(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            now = time.perf_counter_ns()
            message = orjson.loads(line)
            with self.changed:
                if "id" in message and "method" not in message:
                    self.replies[int(message["id"])] = now
                    self.results[int(message["id"])] = message.get("result")
                elif message.get("method") == "session/update":
                    update = message["params"]["update"]
                    call_id = str(update.get("toolCallId", ""))
                    if call_id.startswith(_SEARCH_CALL) and "status" in update:
                        self.statuses.append((now, str(update["status"])))
                self.changed.notify_all()

    def send(self, method: str, params: dict[str, Any]) -> tuple[int, int]:
        """Write one request; (its id, when it was written in ns)."""
        assert self.process.stdin is not None
        with self.write_lock:
            request_id = self.next_id
            self.next_id += 1
            line = orjson.dumps(
                {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
            )
            sent = time.perf_counter_ns()
            self.process.stdin.write(line + b"\n")
            self.process.stdin.flush()
        return request_id, sent

    def wait(self, predicate: Any, timeout_s: float) -> bool:
        with self.changed:
            return bool(self.changed.wait_for(predicate, timeout_s))

    def call(self, method: str, params: dict[str, Any], timeout_s: float = 30.0) -> Any:
        """Send a request and wait for its result."""
        request_id, _ = self.send(method, params)
        if not self.wait(lambda: request_id in self.replies, timeout_s):
            raise RuntimeError(f"no reply to {method} within {timeout_s}s")
        return self.results[request_id]


def _tree(root: Path, lines: int, copies: int) -> None:
    (root / "a_long.txt").write_text("a" * 50_000 + "!\n")
    bulk = root / "bulk.txt"
    bulk.write_bytes(b"a!\n" * lines)
    for i in range(copies):
        os.link(bulk, root / f"copy{i:03d}.txt")


def _probe(agent: _Agent, cwd: Path, interval_s: float, until: Any, max_s: float) -> list[int]:
    """Send ``session/new`` every ``interval_s`` until ``until()``; each one's wait in ns."""
    sent: list[tuple[int, int]] = []
    deadline = time.monotonic() + max_s
    next_at = time.monotonic()
    while not until() and time.monotonic() < deadline:
        sent.append(agent.send("session/new", {"cwd": str(cwd), "mcpServers": []}))
        next_at += interval_s
        time.sleep(max(0.0, next_at - time.monotonic()))
    ids = {request_id for request_id, _ in sent}
    agent.wait(lambda: ids <= agent.replies.keys(), 30.0)
    return [agent.replies[i] - t for i, t in sent if i in agent.replies]


def _search_scenario(
    agent: _Agent,
    server: FakeProviderServer,
    cwd: Path,
    session_id: str,
    name: str,
    pattern: str,
    interval_s: float,
) -> dict[str, Any]:
    call = (_SEARCH_CALL + name, "search", {"pattern": pattern})
    server.enqueue(
        ScriptedResponse(events=anthropic_sse(tool_calls=[call])),
        ScriptedResponse(events=anthropic_sse(text="Searched.")),
    )
    agent.statuses.clear()
    prompt_id, _ = agent.send(
        "session/prompt",
        {"sessionId": session_id, "prompt": [{"type": "text", "text": "search"}]},
    )

    def status_seen(name: str) -> bool:
        return any(status == name for _, status in agent.statuses)

    def finished() -> bool:
        return status_seen("completed") or status_seen("failed")

    agent.wait(lambda: status_seen("in_progress"), 30.0)
    waits = _probe(agent, cwd, interval_s, finished, max_s=120.0)
    agent.wait(lambda: prompt_id in agent.replies, 60.0)
    started = next(t for t, status in agent.statuses if status == "in_progress")
    ended = next((t for t, status in agent.statuses if status in ("completed", "failed")), None)
    return {
        "pattern": pattern,
        "search_s": None if ended is None else round((ended - started) / 1e9, 3),
        "outcome": agent.statuses[-1][1],
        "wait_ms": h.summarize_ms(waits),
    }


def run(lines: int, copies: int, interval_ms: float, idle_s: float) -> dict[str, Any]:
    interval_s = interval_ms / 1000.0
    with tempfile.TemporaryDirectory() as tmp, FakeProviderServer() as server:
        cwd = Path(tmp)
        _tree(cwd, lines, copies)
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        env["ANTHROPIC_API_KEY"] = "bench-key"
        command = [sys.executable, "-m", "toolprep.runtime.cli", "acp", "--no-persist"]
        command += ["--provider"]
        command += ["anthropic", "--base-url", server.base_url]
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=h.REPO
        )
        agent = _Agent(process)
        threading.Thread(target=agent.read_forever, name="agent-reader", daemon=True).start()
        try:
            agent.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            created = agent.call("session/new", {"cwd": str(cwd), "mcpServers": []})
            session = str(created["sessionId"])
            stop_at = time.monotonic() + idle_s
            idle = _probe(agent, cwd, interval_s, lambda: time.monotonic() >= stop_at, idle_s + 1)
            scenarios: dict[str, Any] = {"idle": {"wait_ms": h.summarize_ms(idle)}}
            for name, pattern in (
                ("search-blocks", r"\A(a+)+$"),
                ("search-lines", r"(?-m)\A(a+)+$"),
            ):
                scenarios[name] = _search_scenario(
                    agent, server, cwd, session, name.replace("-", "_"), pattern, interval_s
                )
        finally:
            assert process.stdin is not None
            process.stdin.close()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    return {
        "benchmark": "pattern_stall",
        "machine": h.machine_info(),
        "tree": {"lines_per_file": lines, "copies": copies, "bytes_per_file": 3 * lines},
        "interval_ms": interval_ms,
        "target_max_ms": TARGET_MAX_MS,
        "scenarios": scenarios,
    }


def _print(report: dict[str, Any]) -> None:
    print(
        f"tree: {report['tree']['copies']} files x {report['tree']['bytes_per_file']} bytes; "
        f"a session/new every {report['interval_ms']:g} ms; target max <= {TARGET_MAX_MS:g} ms"
    )
    print(f"{'scenario':<15}{'search s':>9}{'probes':>8}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    for name, figures in report["scenarios"].items():
        waits = figures["wait_ms"]
        search_s = figures.get("search_s")
        print(
            f"{name:<15}{'' if search_s is None else f'{search_s:.2f}':>9}{waits['count']:>8}"
            f"{waits['p50']:>9}{waits['p99']:>9}{waits['max']:>9}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=2_000_000, help="lines per searched file")
    parser.add_argument("--copies", type=int, default=40, help="hard links of that file")
    parser.add_argument("--interval-ms", type=float, default=10.0, help="time between probes")
    parser.add_argument("--idle-s", type=float, default=3.0, help="length of the baseline")
    parser.add_argument("--report", type=Path, default=DEFAULT_REPORT)
    args = parser.parse_args(argv)
    report = run(args.lines, args.copies, args.interval_ms, args.idle_s)
    _print(report)
    h.write_report(args.report, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
