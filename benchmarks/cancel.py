"""Cancel: how fast a cancelled turn is cleaned up, seen from the editor.

Every session's provider stream stalls mid tool-call (``load_server --stall``:
the tool call's id and name, a few argument fragments, then silence), so
the runtime has shown a preparing card that only a cancel can end. As soon
as the drain thread reads a session's preparing frame it writes
``session/cancel`` for that session to the agent's input pipe, and measures
from that write until it has read both

- the discarded update (``tool_call_update`` failed, ``_meta.preparationDiscarded``)
  for every preparing card of the attempt, and
- the ``session/prompt`` response with ``stopReason: "cancelled"``,

checking the order the spec demands: every discard before the reply. Each
session repeats this ``--rounds`` times. Sessions start spread over
``--stagger`` seconds so the cancels are not one synchronised burst (set 0 for
the burst).

Each run measures the embedded runtime (agent and runtime in this process)
and, with ``--workers N ...``, the real ``toolprep acp --workers N`` process
over pipes for each N, so the cancel path through the worker front (cancel
routed to the owning worker, discards and reply relayed back) is measured in
the same run; the table ends with each host's p99 as a ratio of the
embedded one.

Run: ``python -m benchmarks.cancel [--sessions 100] [--rounds 5] [--provider anthropic|openai]
[--workers 1 2]``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import _harness as h

DEFAULT_REPORT = h.REPORTS / "cancel.json"
TARGET_P99_MS = 10.0


@dataclass
class _Session:
    session_id: str
    rounds_left: int
    state: str = "idle"  # idle -> streaming -> cancelling -> idle
    cards: set[str] = field(default_factory=set)
    cancel_ns: int = 0
    last_discard_ns: int = 0


@contextlib.contextmanager
def _embedded_agent(provider_name: str, base_url: str) -> Iterator[tuple[int, int]]:
    """The agent and its runtime in this process, on pipes; yields the client's ends."""
    from toolprep.runtime.acp.agent import AcpAgent
    from toolprep.runtime.acp.jsonrpc_connection import JsonRpcConnection
    from toolprep.runtime.hosting.runtime import Runtime
    from toolprep.runtime.providers.factory import build_provider
    from toolprep.runtime.providers.routes import ModelRoute

    provider = build_provider(provider_name, base_url=base_url, api_key="bench", max_retries=0)
    runtime = Runtime([ModelRoute(provider, "bench")], h.bench_registry())
    pipes = h.make_pipes()
    connection = JsonRpcConnection(pipes.agent_in, pipes.agent_out)
    AcpAgent(runtime, connection)
    connection.start()
    try:
        yield pipes.client_w, pipes.client_r
    finally:
        runtime.shutdown()
        connection.close()


@contextlib.contextmanager
def _cli_agent(provider_name: str, base_url: str, workers: int) -> Iterator[tuple[int, int]]:
    """``toolprep acp --workers N`` in its own process; yields the client's pipe ends."""
    with h.cli_agent(provider_name, base_url, ["--workers", str(workers)]) as agent:
        yield agent.to_agent, agent.from_agent


def run(
    sessions: int,
    rounds: int,
    rate: float,
    provider_name: str,
    stagger_s: float,
    timeout_s: float,
    workers: int | None = None,
) -> dict[str, Any]:
    """One host: the embedded runtime (``workers`` None) or ``toolprep acp --workers N``."""
    reply_ns: list[int] = []
    discard_ns: list[int] = []
    order_violations = 0
    missing_discards = 0
    wrong_stop: dict[str, int] = {}
    done_sessions = threading.Event()
    finished = 0
    lock = threading.Lock()
    by_id: dict[str, _Session] = {}

    with contextlib.ExitStack() as stack:
        server = stack.enter_context(h.loopback_server(rate, stall=True))
        base_url = server.base_url + ("/v1" if provider_name == "openai" else "")
        if workers is None:
            to_agent, from_agent = stack.enter_context(_embedded_agent(provider_name, base_url))
        else:
            to_agent, from_agent = stack.enter_context(_cli_agent(provider_name, base_url, workers))
        client: h.AcpClient

        def start_round(session: _Session) -> None:
            session.state = "streaming"
            session.cards = set()
            session.last_discard_ns = 0
            client.request(
                "session/prompt",
                {"sessionId": session.session_id, "prompt": [{"type": "text", "text": "go"}]},
                lambda response, read_ns: on_reply(session, response, read_ns),
            )

        def on_reply(session: _Session, response: dict[str, Any], read_ns: int) -> None:
            nonlocal order_violations, missing_discards, finished
            result = response.get("result")
            stop = str(result.get("stopReason")) if isinstance(result, dict) else "error"
            if session.state == "cancelling" and stop == "cancelled":
                reply_ns.append(read_ns - session.cancel_ns)
                if session.cards:
                    order_violations += 1  # a card was still open when the reply came
                elif session.last_discard_ns:
                    discard_ns.append(session.last_discard_ns - session.cancel_ns)
                else:
                    missing_discards += 1
            else:
                wrong_stop[stop] = wrong_stop.get(stop, 0) + 1
            session.state = "idle"
            session.rounds_left -= 1
            if session.rounds_left > 0:
                start_round(session)
            else:
                with lock:
                    finished += 1
                    if finished == sessions:
                        done_sessions.set()

        def on_update(session_id: str, update: dict[str, Any], read_ns: int) -> None:
            session = by_id.get(session_id)
            if session is None:
                return
            if h.preparing_stamp_ns(update) is not None:
                session.cards.add(update["toolCallId"])
                if session.state == "streaming":
                    session.state = "cancelling"
                    session.cancel_ns = time.time_ns()
                    client.send_now("session/cancel", {"sessionId": session_id}, notification=True)
            elif h.is_discard(update):
                session.cards.discard(update["toolCallId"])
                session.last_discard_ns = read_ns

        client = h.AcpClient(to_agent, from_agent, on_update)
        client.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        workdir = tempfile.mkdtemp(prefix="toolprep-cancel-")
        for _ in range(sessions):
            sid = client.call("session/new", {"cwd": workdir, "mcpServers": []})["result"][
                "sessionId"
            ]
            by_id[sid] = _Session(sid, rounds)
        peak_threads = h.os_threads()
        foreign = h.ForeignLoad(server.process.pid)
        started = time.monotonic()
        for session, offset in zip(
            list(by_id.values()), h.stagger(sessions, stagger_s), strict=False
        ):
            delay = started + offset - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            start_round(session)
        deadline = time.monotonic() + timeout_s
        while not done_sessions.is_set() and time.monotonic() < deadline:
            peak_threads = max(peak_threads, h.os_threads())
            done_sessions.wait(0.1)
        elapsed = time.monotonic() - started
        other_cores = foreign.cores()
        stats = server.stats()
        client.close_input()  # the agent cancels what is left and exits
        client.wait_drained(15)

    total = h.summarize_ms(reply_ns)
    p99 = total["p99"]
    return {
        "benchmark": "cancel",
        "machine": h.machine_info(),
        "config": {
            "sessions": sessions,
            "rounds": rounds,
            "rate": rate,
            "provider": provider_name,
            "stagger_s": stagger_s,
            "host": host_label(workers),
        },
        "elapsed_s": round(elapsed, 2),
        "cancels_measured": len(reply_ns),
        "sessions_finished": finished,
        "cancel_to_reply_ms": total,
        "cancel_to_last_discard_ms": h.summarize_ms(discard_ns),
        "order_violations": order_violations,
        "missing_discards": missing_discards,
        "unexpected_stop_reasons": wrong_stop,
        "peak_threads": peak_threads,
        "other_processes_cores": other_cores,
        "server": stats,
        "target": {
            "target": f"cancel -> all discards + cancelled reply, p99 <= {TARGET_P99_MS} ms",
            "p99_ms": p99,
            "verdict": "PASS"
            if (
                p99 is not None
                and p99 <= TARGET_P99_MS
                and order_violations == 0
                and finished == sessions
            )
            else "MISS",
        },
    }


def host_label(workers: int | None) -> str:
    return "embedded" if workers is None else f"toolprep acp --workers {workers}"


def print_report(report: dict[str, Any], provider: str) -> None:
    t = report["cancel_to_reply_ms"]
    d = report["cancel_to_last_discard_ms"]
    config = report["config"]
    print(
        f"{config['host']}, provider {provider}: {config['sessions']} sessions x "
        f"{config['rounds']} rounds, {report['cancels_measured']} cancels measured in "
        f"{report['elapsed_s']} s"
    )
    print(
        f"  cancel -> cancelled reply:  p50 {t['p50']} ms  p90 {t['p90']} ms  "
        f"p99 {t['p99']} ms  max {t['max']} ms"
    )
    print(
        f"  cancel -> last discard:     p50 {d['p50']} ms  p90 {d['p90']} ms  "
        f"p99 {d['p99']} ms  max {d['max']} ms"
    )
    print(
        f"  order violations (reply before a discard): {report['order_violations']}; "
        f"turns with no discard seen: {report['missing_discards']}; "
        f"unexpected stop reasons: {report['unexpected_stop_reasons'] or 'none'}; "
        f"peak threads {report['peak_threads']}; other processes used "
        f"{report['other_processes_cores']:.2f} cores meanwhile"
    )
    target = report["target"]
    print(f"  {target['verdict']}  {target['target']}  (p99 {target['p99_ms']} ms)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5, help="cancelled turns per session")
    parser.add_argument("--rate", type=float, default=20.0, help="provider events/s per stream")
    parser.add_argument("--provider", choices=("anthropic", "openai"), default="anthropic")
    parser.add_argument(
        "--stagger", type=float, default=1.0, help="seconds over which sessions start"
    )
    parser.add_argument(
        "--timeout", type=float, default=180.0, help="give up after this many seconds"
    )
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=180.0,
        help="first wait up to this many seconds for other processes to go idle",
    )
    parser.add_argument(
        "--workers",
        type=int,
        nargs="*",
        default=[],
        metavar="N",
        help="also measure the real `toolprep acp --workers N` process, for each N",
    )
    parser.add_argument("--report", type=Path, default=DEFAULT_REPORT)
    args = parser.parse_args(argv)
    if args.sessions < 1 or args.rounds < 1:
        parser.error("--sessions and --rounds must be positive")
    if args.wait_quiet > 0:
        h.wait_for_quiet(max_wait=args.wait_quiet)
    if any(n < 1 for n in args.workers):
        parser.error("--workers counts must be >= 1")
    reports = []
    for workers in [None, *args.workers]:
        report = run(
            args.sessions,
            args.rounds,
            args.rate,
            args.provider,
            args.stagger,
            args.timeout,
            workers,
        )
        print_report(report, args.provider)
        reports.append(report)
    baseline = reports[0]["cancel_to_reply_ms"]["p99"]
    for report in reports[1:]:
        p99 = report["cancel_to_reply_ms"]["p99"]
        ratio = f"{p99 / baseline:.2f}" if p99 is not None and baseline else "n/a"
        print(f"p99 ratio {report['config']['host']} / embedded: {ratio}")
    report = reports[0] if len(reports) == 1 else {"benchmark": "cancel", "runs": reports}
    h.write_report(args.report, report)
    print(f"report: {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
