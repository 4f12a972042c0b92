"""Soak: many turns through one process, watching memory and threads for growth.

A fixed number of concurrent sessions (``--sessions``) loop prompts through
the real runtime and ACP connection against the loopback provider (unpaced
by default, so the turns come as fast as the runtime takes them). Each
session is closed and replaced by a new one after ``--turns-per-session``
turns, so a session's own history (which rightly grows with its turns) does
not pass for a leak, while anything kept per closed session would show.

Every ``--turns / --samples`` finished turns it samples VmRSS, the thread
count and the sizes of the runtime's own tables (sessions known to each
role, open stream tasks, the scheduler's timer heap, live preparation side
table entries, Python objects). After the warm-up share of the turns it
fits a least-squares line to each and prints the slopes per 1000 turns,
flagging growth above the thresholds below.

Run: ``python -m benchmarks.soak [--turns 10000] [--sessions 20] [--rate 0]``.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks import _harness as h

DEFAULT_REPORT = h.REPORTS / "soak.json"
RSS_SLOPE_LIMIT_KIB = 64.0
"""KiB per 1000 turns above which RSS counts as growing (after warm-up)."""
THREAD_SLOPE_LIMIT = 0.05
TABLE_SLOPE_LIMIT = 1.0
"""Entries per 1000 turns above which a runtime table counts as growing."""


def slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of ys over xs (``None`` with fewer than 3 points)."""
    n = len(xs)
    if n < 3:
        return None
    mx = sum(xs) / n
    my = sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=False)) / var


def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``: returns freed heap memory to the kernel (None where unavailable)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):
        return None


def _thread_names() -> dict[str, int]:
    names: dict[str, int] = {}
    for thread in threading.enumerate():
        key = h._fold_name(thread.name)
        names[key] = names.get(key, 0) + 1
    return names


def _top_growth(before: Any, after: Any, limit: int = 15) -> list[dict[str, Any]]:
    """Allocation sites whose live memory grew most between two tracemalloc snapshots."""
    rows = []
    grown = [stat for stat in after.compare_to(before, "traceback") if stat.size_diff > 0]
    for stat in grown[:limit]:
        frames = [
            f"{f.filename.split('site-packages/')[-1].replace(str(h.REPO) + '/', '')}:{f.lineno}"
            for f in stat.traceback[-4:]
        ]
        rows.append(
            {"kib": round(stat.size_diff / 1024, 1), "blocks": stat.count_diff, "where": frames}
        )
    return rows


class _TurnLoop:
    """Sessions that loop prompts until ``turns`` are answered; each session is closed and
    replaced after ``per_session`` turns. Callbacks run on the client's drain thread."""

    def __init__(
        self, client: h.AcpClient, runtime: Any, workdir: str, turns: int, per_session: int
    ) -> None:
        self.client = client
        self.runtime = runtime
        self.workdir = workdir
        self.turns = turns
        self.per_session = per_session
        self.lock = threading.Lock()
        self.counters = {
            "started": 0,
            "done": 0,
            "errors": 0,
            "sessions_opened": 0,
            "sessions_closed": 0,
        }
        self.stop_reasons: dict[str, int] = {}
        self.all_done = threading.Event()

    def done(self) -> int:
        with self.lock:
            return self.counters["done"]

    def _claim_turn(self) -> bool:
        with self.lock:
            if self.counters["started"] >= self.turns:
                return False
            self.counters["started"] += 1
            return True

    def open_session(self) -> None:
        if not self._claim_turn():
            return

        def opened(response: dict[str, Any], _read_ns: int) -> None:
            with self.lock:
                self.counters["sessions_opened"] += 1
            self._prompt(response["result"]["sessionId"], 0)

        self.client.request("session/new", {"cwd": self.workdir, "mcpServers": []}, opened)

    def _count(self, response: dict[str, Any]) -> None:
        result = response.get("result")
        reason = str(result.get("stopReason")) if isinstance(result, dict) else "error"
        with self.lock:
            self.counters["done"] += 1
            self.stop_reasons[reason] = self.stop_reasons.get(reason, 0) + 1
            if reason == "error":
                self.counters["errors"] += 1
            if self.counters["done"] >= self.turns:
                self.all_done.set()

    def _prompt(self, session_id: str, done_in_session: int) -> None:
        def finished(response: dict[str, Any], _read_ns: int) -> None:
            self._count(response)
            if done_in_session + 1 >= self.per_session:
                self.runtime.close_session(session_id)
                with self.lock:
                    self.counters["sessions_closed"] += 1
                self.open_session()
            elif self._claim_turn():
                self._prompt(session_id, done_in_session + 1)

        self.client.request(
            "session/prompt",
            {"sessionId": session_id, "prompt": [{"type": "text", "text": "go"}]},
            finished,
        )


class _Sampler:
    """One row per sample: RSS, threads and the size of every runtime table."""

    def __init__(self, runtime: Any, malloc_trim: bool) -> None:
        self.runtime = runtime
        self.trim = _malloc_trim() if malloc_trim else None
        self.rows: list[dict[str, Any]] = []

    def sample(self, done: int, elapsed: float) -> None:
        from toolprep.messages.preparation import tracked_response_count

        gc.collect()
        if self.trim is not None:
            self.trim(0)  # hand freed heap back first: what stays is live, not retained
        runtime = self.runtime
        self.rows.append(
            {
                "turns": done,
                "elapsed_s": round(elapsed, 2),
                "rss_kib": h.rss_kib(),
                "threads": h.os_threads(),
                "supervisor_sessions": len(runtime.supervisor_state.sessions),
                "tracker_sessions": len(runtime.tracker_state.sessions),
                "emitter_sinks": len(runtime.emitter_state.sinks),
                "executor_cancelled_through": len(runtime.executor_state.cancelled_through),
                "reader_tasks": len(runtime.reader_state.tasks),
                "scheduler_timers": runtime.scheduler.pending,
                "preparation_entries": tracked_response_count(),
                "supervisor_delays": len(runtime.supervisor_state.delays),
                "python_objects": len(gc.get_objects()),
                "allocated_blocks": sys.getallocatedblocks(),
            }
        )


class _Snapshots:
    """``--tracemalloc``: one snapshot once warm-up is over, one at the end."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.taken: list[Any] = []
        if enabled:
            import tracemalloc

            tracemalloc.start(8)

    def after_warmup(self) -> None:
        if self.enabled and not self.taken:
            import tracemalloc

            self.taken.append(tracemalloc.take_snapshot())

    def at_end(self) -> None:
        if self.enabled and self.taken:
            import tracemalloc

            self.taken.append(tracemalloc.take_snapshot())
            tracemalloc.stop()

    def report(self) -> dict[str, Any]:
        if len(self.taken) != 2:
            return {"tracemalloc_top_growth": None, "tracemalloc_growth_kib": None}
        before, after = self.taken
        grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
        return {
            "tracemalloc_top_growth": _top_growth(before, after),
            "tracemalloc_growth_kib": round(grown / 1024, 1),
        }


def _slopes(rows: list[dict[str, Any]], turns: int, warmup_share: float) -> dict[str, float | None]:
    """Least-squares slope per 1000 turns of every sampled figure, after the warm-up."""
    measured = [r for r in rows if r["turns"] >= warmup_share * turns]
    xs = [r["turns"] / 1000.0 for r in measured]
    slopes: dict[str, float | None] = {}
    for key in rows[0]:
        if key in ("turns", "elapsed_s"):
            continue
        value = slope(xs, [float(r[key]) for r in measured])
        slopes[key] = None if value is None else round(value, 3)
    return slopes


GROWTH_LIMITS = {
    "rss_kib": (RSS_SLOPE_LIMIT_KIB, "RSS grows {:.1f} KiB per 1000 turns (limit {limit})"),
    "threads": (THREAD_SLOPE_LIMIT, "threads grow {:.3f} per 1000 turns"),
    "python_objects": (1000.0, "python objects grow {:.0f} per 1000 turns"),
    "allocated_blocks": (1000.0, "allocated memory blocks grow {:.0f} per 1000 turns"),
}
"""Figure -> (slope above which it is flagged, the flag); every other figure is a table."""


def growth_flags(slopes: dict[str, float | None]) -> list[str]:
    """What grew faster than its limit: RSS, threads, objects, blocks, any runtime table."""
    flags: list[str] = []
    for key, value in slopes.items():
        limit, text = GROWTH_LIMITS.get(
            key, (TABLE_SLOPE_LIMIT, key + " grows {:.1f} entries per 1000 turns")
        )
        if value is not None and value > limit:
            flags.append(text.format(value, limit=limit))
    return flags


def run(
    turns: int,
    sessions: int,
    per_session: int,
    rate: float,
    provider_name: str,
    samples: int,
    warmup_share: float,
    timeout_s: float,
    trace: bool = False,
    tool_timeout: float | None = None,
    malloc_trim: bool = False,
) -> dict[str, Any]:
    from toolprep.runtime.acp.agent import AcpAgent
    from toolprep.runtime.acp.jsonrpc_connection import JsonRpcConnection
    from toolprep.runtime.hosting.runtime import Runtime, RuntimeConfig
    from toolprep.runtime.providers.factory import build_provider
    from toolprep.runtime.providers.routes import ModelRoute

    snapshots = _Snapshots(trace)
    with h.loopback_server(rate) as server:
        base_url = server.base_url + ("/v1" if provider_name == "openai" else "")
        provider = build_provider(provider_name, base_url=base_url, api_key="bench", max_retries=0)
        config = (
            RuntimeConfig() if tool_timeout is None else RuntimeConfig(tool_timeout=tool_timeout)
        )
        runtime = Runtime([ModelRoute(provider, "bench")], h.bench_registry(), config)
        pipes = h.make_pipes()
        connection = JsonRpcConnection(pipes.agent_in, pipes.agent_out)
        AcpAgent(runtime, connection)
        connection.start()
        client = h.AcpClient(pipes.client_w, pipes.client_r, lambda sid, update, read_ns: None)
        client.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        workdir = tempfile.mkdtemp(prefix="toolprep-soak-")
        loop = _TurnLoop(client, runtime, workdir, turns, per_session)
        sampler = _Sampler(runtime, malloc_trim)

        foreign = h.ForeignLoad(server.process.pid)
        started = time.monotonic()
        sampler.sample(0, 0.0)
        for _ in range(min(sessions, turns)):
            loop.open_session()
        step = max(1, turns // samples)
        next_mark = step
        deadline = started + timeout_s
        while not loop.all_done.is_set() and time.monotonic() < deadline:
            loop.all_done.wait(0.05)
            done = loop.done()
            if done >= next_mark:
                sampler.sample(done, time.monotonic() - started)
                next_mark = (done // step + 1) * step
                if done >= warmup_share * turns:
                    snapshots.after_warmup()
        elapsed = time.monotonic() - started
        other_cores = foreign.cores()
        time.sleep(0.3)  # let the last closes and frames settle
        sampler.sample(loop.done(), elapsed)
        snapshots.at_end()
        stats = server.stats()
        threads_at_end = _thread_names()
        runtime.shutdown()
        connection.close()
        client.close_input()
        client.wait_drained(10)

    rows = sampler.rows
    slopes = _slopes(rows, turns, warmup_share)
    tail = [r for r in rows if r["turns"] >= 0.5 * turns]
    tail_slope = slope([r["turns"] / 1000.0 for r in tail], [float(r["rss_kib"]) for r in tail])
    done = loop.counters["done"]
    return {
        "benchmark": "soak",
        "machine": h.machine_info(),
        "config": {
            "turns": turns,
            "sessions": sessions,
            "turns_per_session": per_session,
            "rate": rate,
            "tool_timeout": tool_timeout,
            "malloc_trim": malloc_trim,
            "provider": provider_name,
            "samples": samples,
            "warmup_share": warmup_share,
        },
        "elapsed_s": round(elapsed, 2),
        "turns_done": done,
        "turns_per_s": round(done / elapsed, 1) if elapsed else None,
        "sessions_opened": loop.counters["sessions_opened"],
        "sessions_closed": loop.counters["sessions_closed"],
        "stop_reasons": loop.stop_reasons,
        "server": stats,
        "other_processes_cores": other_cores,
        "slopes_per_1000_turns": slopes,
        "rss_slope_last_half_kib": None if tail_slope is None else round(tail_slope, 1),
        "rss_kib_first_last": [rows[0]["rss_kib"], rows[-1]["rss_kib"]],
        "threads_first_last": [rows[0]["threads"], rows[-1]["threads"]],
        "thread_names_at_end": threads_at_end,
        "growth_flags": growth_flags(slopes),
        **snapshots.report(),
        "samples": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=10000)
    parser.add_argument("--sessions", type=int, default=20, help="concurrent sessions")
    parser.add_argument(
        "--turns-per-session",
        type=int,
        default=25,
        help="turns before a session is closed and replaced",
    )
    parser.add_argument(
        "--rate", type=float, default=0.0, help="provider events/s per stream (0: unpaced)"
    )
    parser.add_argument("--provider", choices=("anthropic", "openai"), default="anthropic")
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument(
        "--warmup", type=float, default=0.2, help="share of turns left out of the fit"
    )
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=180.0,
        help="first wait up to this many seconds for other processes to go idle",
    )
    parser.add_argument(
        "--tool-timeout",
        type=float,
        default=None,
        help="RuntimeConfig.tool_timeout (default: the runtime's own)",
    )
    parser.add_argument(
        "--malloc-trim",
        action="store_true",
        help="call malloc_trim(0) before each RSS sample (retained vs live memory)",
    )
    parser.add_argument(
        "--tracemalloc",
        action="store_true",
        help="trace allocations (slow) and print the sites that grew after warm-up",
    )
    parser.add_argument("--report", type=Path, default=DEFAULT_REPORT)
    args = parser.parse_args(argv)
    if args.wait_quiet > 0:
        h.wait_for_quiet(max_wait=args.wait_quiet)
    if args.turns < 1 or args.sessions < 1 or args.turns_per_session < 1:
        parser.error("--turns, --sessions and --turns-per-session must be positive")
    report = run(
        args.turns,
        args.sessions,
        args.turns_per_session,
        args.rate,
        args.provider,
        args.samples,
        args.warmup,
        args.timeout,
        args.tracemalloc,
        args.tool_timeout,
        args.malloc_trim,
    )
    print(
        f"{report['turns_done']} turns in {report['elapsed_s']} s "
        f"({report['turns_per_s']} turns/s), "
        f"{report['sessions_opened']} sessions opened, {report['sessions_closed']} closed; "
        f"stop reasons {report['stop_reasons']}; other processes used "
        f"{report['other_processes_cores']:.2f} cores meanwhile"
    )
    print(
        f"RSS {report['rss_kib_first_last'][0]} -> {report['rss_kib_first_last'][1]} KiB, "
        f"threads {report['threads_first_last'][0]} -> {report['threads_first_last'][1]}"
    )
    print(f"threads at the end: {report['thread_names_at_end']}")
    print("slopes per 1000 turns (after warm-up):")
    for key, value in report["slopes_per_1000_turns"].items():
        unit = " KiB" if key == "rss_kib" else ""
        print(f"  {key:<28}{'-' if value is None else f'{value:+.3f}'}{unit}")
    print(
        f"  (RSS over the last half of the turns only: "
        f"{report['rss_slope_last_half_kib']} KiB per 1000 turns)"
    )
    last = report["samples"][-1]
    print(
        "final table sizes: "
        + ", ".join(f"{k}={v}" for k, v in last.items() if k not in ("turns", "elapsed_s"))
    )
    if report["tracemalloc_top_growth"]:
        print(
            f"traced Python allocations grew {report['tracemalloc_growth_kib']} KiB after warm-up; "
            "the sites that grew most:"
        )
        for row in report["tracemalloc_top_growth"][:10]:
            print(
                f"  {row['kib']:+10.1f} KiB {row['blocks']:+8d} blocks  "
                f"{' <- '.join(reversed(row['where']))}"
            )
    if report["growth_flags"]:
        for flag in report["growth_flags"]:
            print(f"GROWTH  {flag}")
    else:
        print("no growth flagged")
    h.write_report(args.report, report)
    print(f"report: {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
