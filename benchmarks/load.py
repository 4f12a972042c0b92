"""Load: many concurrent sessions through the real runtime, ACP connection included.

For each session count N a fresh child process runs the whole stack: the
loopback provider (``benchmarks.sse_server``, its own process) streams
realistic turns at ``--rate`` events/s per stream; the runtime reads them
with the real SDK provider; the real ``AcpAgent`` and ``JsonRpcConnection``
take ``session/new`` / ``session/prompt`` lines from one pipe and write every
``session/update`` to another, which a drain thread reads and parses like an
editor would. Every session loops prompts until the measured window ends.

Per N it reports provider events/s (``GET /stats`` deltas over the window),
frames/s, preparing-card latency (server send stamp in the tool-call id ->
frame read from the pipe), peak thread count, RSS per idle session (VmRSS
delta over opening N sessions / N) and CPU per event (process CPU less the
client threads', over the window).

Then the same events go through the same role handlers with no actors
(``benchmarks._direct``): once generated in-process (``direct-inproc``: SSE
decoder, adapter, tracker, supervisor, executor, emitter, JSON-RPC writes,
nothing else) and once over HTTP from the same server (``direct-http``: the
identical transport, minus actors). Actor overhead is the ratio of CPU per
event, actors / direct.

``--transport aiohttp,httpx`` runs every N once per HTTP client (the SDKs'
aiohttp client, which the runtime uses, and their default httpx client), so
the two compare within one run. ``--gc default`` leaves the collector as
CPython sets it instead of the agent's start-up tuning (``gc_tuning``).

Run: ``python -m benchmarks.load [--sessions 1,100,1000] [--rate 20] [--duration 10]
[--provider anthropic|openai] [--transport aiohttp,httpx] [--gc daemon|default]
[--plot out.png] [--report path]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks import _harness as h

DEFAULT_REPORT = h.REPORTS / "load.json"

TARGET_P99_MS = 5.0
TARGET_THREADS = 32
TARGET_RSS_KIB = 50.0
TARGET_OVERHEAD = 1.5
TARGET_RATE_SHARE = 0.9
"""A run 'holds' N x R events/s when the server got at least this share of it out."""

MODES = ("actors", "direct-http", "direct-inproc")
TRANSPORTS = ("aiohttp", "httpx")
"""The SDKs' aiohttp client (what ``build_provider`` uses) and their default httpx client."""
GC_MODES = ("daemon", "default")


class PooledProvider:
    """Spreads streams round-robin over several SDK clients, each with its own connection pool.

    Not what the runtime does (``build_provider`` makes one client per
    process): it exists to measure what splitting the HTTP pool would buy,
    since the pool's bookkeeping per request and per close scans every
    connection it holds.
    """

    def __init__(self, providers: list[Any]) -> None:
        self.providers = providers
        self.name = providers[0].name
        self._turn = 0

    async def aclose(self) -> None:
        for provider in self.providers:
            await provider.aclose()

    def stream(self, request: Any) -> Any:
        self._turn += 1
        return self.providers[self._turn % len(self.providers)].stream(request)


def build_bench_provider(
    name: str,
    base_url: str,
    sessions: int,
    pools: int,
    keepalive: int | None,
    transport: str = "aiohttp",
) -> Any:
    """The production provider (``pools == 1`` and no ``keepalive``), or the pooled what-if.

    ``transport == "httpx"`` swaps in the SDK's default httpx client, for comparison.
    """
    from toolprep.runtime.providers.factory import DEFAULT_TIMEOUT, build_provider

    if pools <= 1 and keepalive is None:
        http_client: Any = None
        if transport == "httpx":
            import anthropic
            import openai

            sdk: Any = anthropic if name == "anthropic" else openai
            http_client = sdk.DefaultAsyncHttpxClient()
        return build_provider(
            name, base_url=base_url, api_key="bench", max_retries=0, http_client=http_client
        )
    import httpx2

    per_pool = max(1, -(-sessions // max(1, pools)))
    providers = []
    for _ in range(max(1, pools)):
        limits = httpx2.Limits(
            max_connections=max(per_pool, 1000 // max(1, pools)) + 16,
            max_keepalive_connections=keepalive if keepalive else per_pool + 16,
        )
        client = httpx2.AsyncClient(limits=limits, timeout=DEFAULT_TIMEOUT)
        providers.append(
            build_provider(
                name, base_url=base_url, api_key="bench", max_retries=0, http_client=client
            )
        )
    return PooledProvider(providers) if len(providers) > 1 else providers[0]


# --- one measured run (child process) --------------------------------------------------------


class _Meter:
    """What the drain thread records; plain attributes, written by one thread only."""

    def __init__(self) -> None:
        self.recording = False
        self.frames = 0
        self.frames_window = 0
        self.preparing_window = 0
        self.latencies_ns: list[int] = []
        self.turns = 0
        self.turns_window = 0
        self.stop_reasons: dict[str, int] = {}
        self.prompt_errors = 0
        self.in_flight = 0


def run_child(
    mode: str,
    sessions: int,
    rate: float,
    duration: float,
    provider_name: str,
    ramp: float,
    warmup: float,
    pools: int = 1,
    keepalive: int | None = None,
    gc_threshold: tuple[int, ...] | None = None,
    gc_freeze: bool = False,
    transport: str = "aiohttp",
    gc_mode: str = "daemon",
) -> dict[str, Any]:
    """Run one configuration in this process and return its figures."""
    import gc

    from benchmarks._direct import DirectRuntime, InProcessProvider
    from toolprep.actors.stream_reader import ModelRoute
    from toolprep.runtime.acp.agent import AcpAgent
    from toolprep.runtime.acp.jsonrpc import JsonRpcConnection
    from toolprep.runtime.gc_tuning import tune_gc_for_daemon
    from toolprep.runtime.host import Runtime

    gc_pauses = h.GcPauses().install()
    threads_before = h.os_threads()
    rss_start = h.rss_kib()
    server_cm = h.loopback_server(rate) if mode != "direct-inproc" else None
    server = server_cm.__enter__() if server_cm is not None else None
    inproc: InProcessProvider | None = None
    try:
        registry = h.bench_registry()
        if server is not None:
            base_url = server.base_url + ("/v1" if provider_name == "openai" else "")
            provider: Any = build_bench_provider(
                provider_name, base_url, sessions, pools, keepalive, transport
            )
        else:
            inproc = InProcessProvider("openai" if provider_name == "openai" else "anthropic")
            provider = inproc
        routes = [ModelRoute(provider, "bench")]
        runtime: Any = (
            Runtime(routes, registry) if mode == "actors" else DirectRuntime(routes, registry)
        )
        stream_loop = _stream_loop(runtime)
        lag = h.LoopLagProbe(stream_loop).start()

        def events_now() -> int:
            if server is not None:
                return int(server.stats()["events_sent"])
            assert inproc is not None
            return inproc.events

        meter = _Meter()
        pipes = h.make_pipes()
        connection = JsonRpcConnection(pipes.agent_in, pipes.agent_out)
        _agent = AcpAgent(runtime, connection)  # kept alive by the connection's handlers
        if gc_mode == "daemon":
            tune_gc_for_daemon()  # where the CLI does it: runtime built, nothing served yet
        if gc_threshold:
            gc.set_threshold(*gc_threshold)
        connection.start()
        running = threading.Event()
        running.set()
        lock = threading.Lock()

        def on_update(session_id: str, update: dict[str, Any], read_ns: int) -> None:
            meter.frames += 1
            if not meter.recording:
                return
            meter.frames_window += 1
            stamp = h.preparing_stamp_ns(update)
            if stamp is not None:
                meter.preparing_window += 1
                meter.latencies_ns.append(read_ns - stamp)

        client = h.AcpClient(pipes.client_w, pipes.client_r, on_update)
        client.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        workdir = tempfile.mkdtemp(prefix="toolprep-load-")

        def prompt(session_id: str) -> None:
            with lock:
                meter.in_flight += 1

            def done(response: dict[str, Any], _read_ns: int) -> None:
                with lock:
                    meter.in_flight -= 1
                meter.turns += 1
                if meter.recording:
                    meter.turns_window += 1
                result = response.get("result")
                if not isinstance(result, dict):
                    meter.prompt_errors += 1
                else:
                    reason = str(result.get("stopReason"))
                    meter.stop_reasons[reason] = meter.stop_reasons.get(reason, 0) + 1
                if running.is_set():
                    prompt(session_id)

            client.request(
                "session/prompt",
                {"sessionId": session_id, "prompt": [{"type": "text", "text": "go"}]},
                done,
            )

        # A throw-away session first, so lazy one-time set-up is not billed to sessions.
        warm = client.call("session/new", {"cwd": workdir, "mcpServers": []})["result"]["sessionId"]
        runtime.close_session(warm)
        rss_idle_before = h.settle_memory()
        opened: list[str] = []
        all_open = threading.Event()

        def got_session(response: dict[str, Any], _read_ns: int) -> None:
            opened.append(response["result"]["sessionId"])
            if len(opened) == sessions:
                all_open.set()

        for _ in range(sessions):
            client.request("session/new", {"cwd": workdir, "mcpServers": []}, got_session)
        if not all_open.wait(60):
            raise RuntimeError(f"only {len(opened)} of {sessions} sessions opened")
        time.sleep(0.3)  # let the roles take in SessionOpened / AttachSink
        rss_idle_after = h.settle_memory()
        if gc_freeze:
            gc.freeze()  # everything alive now is start-up state: keep it out of every later scan
        threads_idle = h.os_threads()

        peak_threads = threads_idle
        peak_rss = rss_idle_after
        threads_at_peak = _thread_names()

        def sample() -> None:
            nonlocal peak_threads, peak_rss, threads_at_peak
            threads = h.os_threads()
            if threads > peak_threads:
                peak_threads = threads
                threads_at_peak = _thread_names()
            peak_rss = max(peak_rss, h.rss_kib())

        start = time.monotonic()
        for session_id, offset in zip(opened, h.stagger(sessions, ramp), strict=False):
            delay = start + offset - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            prompt(session_id)
            if len(opened) < 50 or hash(session_id) % 50 == 0:
                sample()
        warm_until = time.monotonic() + warmup
        while time.monotonic() < warm_until:
            sample()
            time.sleep(0.1)

        harness = [threading.main_thread(), *client.harness_threads()]
        events0 = events_now()
        cpu0 = h.process_cpu_seconds()
        harness0 = sum(h.thread_cpu_seconds(t) for t in harness)
        by_thread0 = h.cpu_by_thread()
        server_cpu0 = server.cpu_seconds() if server is not None else 0.0
        foreign = h.ForeignLoad(*([server.process.pid] if server is not None else []))
        t0 = time.monotonic()
        meter.recording = lag.recording = gc_pauses.recording = True
        window_end = t0 + duration
        while time.monotonic() < window_end:
            sample()
            time.sleep(min(0.1, max(0.0, window_end - time.monotonic())))
        meter.recording = lag.recording = gc_pauses.recording = False
        t1 = time.monotonic()
        events1 = events_now()
        cpu1 = h.process_cpu_seconds()
        harness1 = sum(h.thread_cpu_seconds(t) for t in harness)
        by_thread1 = h.cpu_by_thread()
        server_cpu1 = server.cpu_seconds() if server is not None else 0.0
        foreign_cores = foreign.cores()

        running.clear()
        finish_deadline = time.monotonic() + 60
        while time.monotonic() < finish_deadline:
            with lock:
                if meter.in_flight == 0:
                    break
            sample()
            time.sleep(0.1)
        unfinished = meter.in_flight
        lag.stop()
        runtime.shutdown()
        connection.close()
        client.close_input()
        client.wait_drained(10)
    finally:
        gc_pauses.remove()
        if server_cm is not None:
            server_cm.__exit__(None, None, None)

    window = t1 - t0
    events = events1 - events0
    process_cpu = cpu1 - cpu0
    harness_cpu = harness1 - harness0
    runtime_cpu = process_cpu - harness_cpu
    latencies = meter.latencies_ns
    return {
        "mode": mode,
        "transport": transport if mode != "direct-inproc" else None,
        "gc": gc_mode,
        "gc_threshold_in_effect": list(gc.get_threshold()),
        "provider": provider_name,
        "sessions": sessions,
        "rate_per_session": rate if mode != "direct-inproc" else None,
        "window_s": round(window, 3),
        "events": events,
        "events_per_s": round(events / window, 1),
        "offered_events_per_s": sessions * rate if mode != "direct-inproc" else None,
        "frames_per_s": round(meter.frames_window / window, 1),
        "turns_per_s": round(meter.turns_window / window, 2),
        "preparing_frames": meter.preparing_window,
        "preparing_latency_ms": h.summarize_ms(latencies),
        "preparing_latency_sample_ms": [round(v / 1e6, 3) for v in h.reservoir(latencies, 4000)],
        "threads": {
            "before_runtime": threads_before,
            "idle_with_sessions": threads_idle,
            "peak": peak_threads,
            "harness": len(harness),
            "names_at_peak": threads_at_peak,
        },
        "rss_kib": {
            "process_start": rss_start,
            "before_sessions": rss_idle_before,
            "after_sessions": rss_idle_after,
            "per_idle_session": round((rss_idle_after - rss_idle_before) / sessions, 2),
            "peak_under_load": peak_rss,
        },
        "cpu": {
            "process_s": round(process_cpu, 3),
            "harness_s": round(harness_cpu, 3),
            "runtime_s": round(runtime_cpu, 3),
            "runtime_cores": round(runtime_cpu / window, 3),
            "per_event_us": round(runtime_cpu / events * 1e6, 2) if events else None,
            "per_event_us_with_harness": round(process_cpu / events * 1e6, 2) if events else None,
            "by_thread_s": h.cpu_delta(by_thread0, by_thread1),
            "loopback_server_s": round(server_cpu1 - server_cpu0, 3),
            "other_processes_cores": foreign_cores,
        },
        "stream_loop_lag_ms": h.summarize_ms(lag.lags_ns),
        "gc_pauses": gc_pauses.summary(window),
        "what_if": {
            "http_pools": pools,
            "keepalive": keepalive,
            "gc_threshold": gc_threshold,
            "gc_freeze": gc_freeze,
        },
        "stop_reasons": meter.stop_reasons,
        "prompt_errors": meter.prompt_errors,
        "unfinished_turns_at_exit": unfinished,
        "client_errors": len(client.errors),
    }


def _stream_loop(runtime: Any) -> Any:
    """The asyncio loop every provider stream runs on (the reader's, or the direct pipeline's)."""
    direct_loop = getattr(runtime, "loop", None)
    if direct_loop is not None:
        return direct_loop
    deadline = time.monotonic() + 10
    while runtime.reader_state.loop is None and time.monotonic() < deadline:
        time.sleep(0.01)  # the StreamReader creates it in its own thread at start
    if runtime.reader_state.loop is None:
        raise RuntimeError("the stream reader's loop never started")
    return runtime.reader_state.loop


def _thread_names() -> dict[str, int]:
    names: dict[str, int] = {}
    for thread in threading.enumerate():
        key = h._fold_name(thread.name)
        names[key] = names.get(key, 0) + 1
    return names


# --- orchestration (parent process) ----------------------------------------------------------


def _spawn(
    mode: str, sessions: int, args: argparse.Namespace, transport: str = "aiohttp"
) -> dict[str, Any]:
    """Run one configuration in a fresh interpreter so runs cannot disturb each other."""
    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as out:
        out_path = out.name
    duration = args.duration if mode != "direct-inproc" else args.inproc_duration
    if args.wait_quiet > 0:
        load = h.wait_for_quiet(max_wait=args.wait_quiet)
        if load >= 0.3:
            print(f"  (other processes still use {load:.2f} cores; measuring anyway)", flush=True)
    command = (
        [
            sys.executable,
            "-m",
            "benchmarks.load",
            "--child",
            mode,
            "--sessions",
            str(sessions),
            "--rate",
            str(args.rate),
            "--duration",
            str(duration),
            "--provider",
            args.provider,
            "--ramp",
            str(args.ramp),
            "--warmup",
            str(args.warmup),
            "--child-out",
            out_path,
            "--http-pools",
            str(args.http_pools),
            "--transport",
            transport,
            "--gc",
            args.gc,
        ]
        + (["--keepalive", str(args.keepalive)] if args.keepalive is not None else [])
        + (["--gc-threshold", args.gc_threshold] if args.gc_threshold else [])
        + (["--gc-freeze"] if args.gc_freeze else [])
    )
    try:
        subprocess.run(
            command, cwd=h.REPO, check=True, timeout=duration + args.ramp + args.warmup + 240
        )
        result: dict[str, Any] = json.loads(Path(out_path).read_text(encoding="utf-8"))
        return result
    finally:
        os.unlink(out_path)


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def _ratio(a: float | None, b: float | None) -> float | None:
    if not a or not b:
        return None
    return round(a / b, 2)


def evaluate(
    runs: list[dict[str, Any]],
    baseline: dict[str, Any] | None,
    http_baselines: dict[int, dict[str, Any]],
) -> dict[str, Any]:
    """PASS/MISS per target, judged at the largest N (the scenario the targets name)."""
    largest = max(runs, key=lambda r: r["sessions"])
    offered = largest["offered_events_per_s"] or 0
    share = largest["events_per_s"] / offered if offered else 0.0
    p99 = largest["preparing_latency_ms"]["p99"]
    peaks = [r["threads"]["peak"] for r in runs]
    overhead = (
        _ratio(largest["cpu"]["per_event_us"], baseline["cpu"]["per_event_us"])
        if baseline
        else None
    )
    http = http_baselines.get(largest["sessions"])
    overhead_http = (
        _ratio(largest["cpu"]["per_event_us"], http["cpu"]["per_event_us"]) if http else None
    )
    targets = {
        "throughput_and_p99": {
            "target": f"{largest['sessions']} sessions x "
            f"{largest['rate_per_session']:g} events/s held "
            f"(>= {TARGET_RATE_SHARE:.0%} delivered) with preparing p99 <= {TARGET_P99_MS} ms",
            "events_share": round(share, 3),
            "p99_ms": p99,
            "verdict": _verdict(
                share >= TARGET_RATE_SHARE and p99 is not None and p99 <= TARGET_P99_MS
            ),
        },
        "threads_constant": {
            "target": f"peak threads constant in N (spread <= 2) and <= {TARGET_THREADS}",
            "peaks_by_n": {str(r["sessions"]): r["threads"]["peak"] for r in runs},
            "verdict": _verdict(max(peaks) <= TARGET_THREADS and max(peaks) - min(peaks) <= 2),
        },
        "rss_per_idle_session": {
            "target": f"<= {TARGET_RSS_KIB} KiB per idle session (at N={largest['sessions']})",
            "kib": largest["rss_kib"]["per_idle_session"],
            "verdict": _verdict(largest["rss_kib"]["per_idle_session"] <= TARGET_RSS_KIB),
        },
        "actor_overhead": {
            "target": f"CPU per event actors / direct (in-process events) <= {TARGET_OVERHEAD}x",
            "ratio": overhead,
            "verdict": _verdict(overhead is not None and overhead <= TARGET_OVERHEAD),
            "ratio_vs_direct_http": overhead_http,
            "verdict_vs_direct_http": _verdict(
                overhead_http is not None and overhead_http <= TARGET_OVERHEAD
            ),
        },
    }
    return targets


def _fmt(value: Any, spec: str = "") -> str:
    if value is None:
        return "-"
    return format(value, spec)


def print_table(runs: list[dict[str, Any]]) -> None:
    header = (
        f"{'mode':<22}{'N':>6}{'events/s':>10}{'offered':>9}{'frames/s':>10}{'turns/s':>9}"
        f"{'p50 ms':>8}{'p99 ms':>8}{'max ms':>8}{'preps':>7}{'thr':>5}{'KiB/s':>7}"
        f"{'us/ev':>7}{'cores':>7}{'other':>7}"
    )
    print(header)
    print("-" * len(header))
    for r in runs:
        lat = r["preparing_latency_ms"]
        print(
            f"{_label(r):<22}{r['sessions']:>6}{r['events_per_s']:>10.0f}"
            f"{_fmt(r['offered_events_per_s'], '.0f'):>9}"
            f"{r['frames_per_s']:>10.0f}{r['turns_per_s']:>9.1f}"
            f"{_fmt(lat['p50'], '.2f'):>8}{_fmt(lat['p99'], '.2f'):>8}{_fmt(lat['max'], '.1f'):>8}"
            f"{lat['count']:>7}{r['threads']['peak']:>5}{r['rss_kib']['per_idle_session']:>7.1f}"
            f"{_fmt(r['cpu']['per_event_us'], '.1f'):>7}{r['cpu']['runtime_cores']:>7.2f}"
            f"{r['cpu'].get('other_processes_cores', 0.0):>7.2f}"
        )


def _label(run: dict[str, Any]) -> str:
    transport = run.get("transport")
    return f"{run['mode']}/{transport}" if transport else run["mode"]


def print_breakdown(run: dict[str, Any]) -> None:
    busy = sorted(run["cpu"]["by_thread_s"].items(), key=lambda kv: -kv[1])
    window = run["window_s"]
    parts = ", ".join(
        f"{name} {sec / window * 100:.0f}%" for name, sec in busy if sec / window >= 0.01
    )
    print(
        f"  {_label(run)} N={run['sessions']}: CPU by thread (share of one core): {parts}; "
        f"loopback server {run['cpu']['loopback_server_s'] / window * 100:.0f}%"
    )


def plot(path: Path, runs: list[dict[str, Any]], http_runs: list[dict[str, Any]]) -> bool:
    """Latency distribution per N, and events/s and p99 against N. Needs matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot needs matplotlib, which is not a dependency: pip install matplotlib")
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    for r in runs:
        sample = sorted(r["preparing_latency_sample_ms"])
        if not sample:
            continue
        ys = [(i + 1) / len(sample) for i in range(len(sample))]
        lat = r["preparing_latency_ms"]
        left.plot(
            sample, ys, label=f"N={r['sessions']} (p99 {lat['p99']:.2f} ms, n={lat['count']})"
        )
    left.axvline(
        TARGET_P99_MS,
        color="red",
        linestyle="--",
        linewidth=1,
        label=f"target p99 {TARGET_P99_MS} ms",
    )
    left.axhline(0.99, color="grey", linestyle=":", linewidth=1)
    left.set_xscale("log")
    left.set_xlabel("preparing frame latency, server send -> read from pipe (ms, log)")
    left.set_ylabel("fraction of preparing frames")
    left.set_title("Preparing-card latency (CDF), actors")
    left.legend(fontsize=8, loc="lower right")
    left.grid(True, which="both", alpha=0.3)

    ns = [r["sessions"] for r in runs]
    right.plot(
        ns, [r["events_per_s"] for r in runs], "o-", color="tab:blue", label="events/s (actors)"
    )
    right.plot(
        ns,
        [r["offered_events_per_s"] for r in runs],
        "--",
        color="tab:blue",
        alpha=0.4,
        label="offered N x rate",
    )
    if http_runs:
        right.plot(
            [r["sessions"] for r in http_runs],
            [r["events_per_s"] for r in http_runs],
            "s:",
            color="tab:cyan",
            label="events/s (direct-http, no actors)",
        )
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("concurrent sessions N (log)")
    right.set_ylabel("provider events/s (log)", color="tab:blue")
    twin = right.twinx()
    twin.plot(
        ns,
        [r["preparing_latency_ms"]["p99"] or 0 for r in runs],
        "o-",
        color="tab:red",
        label="preparing p99 ms (actors)",
    )
    if http_runs:
        twin.plot(
            [r["sessions"] for r in http_runs],
            [r["preparing_latency_ms"]["p99"] or 0 for r in http_runs],
            "s:",
            color="tab:orange",
            label="preparing p99 ms (direct-http)",
        )
    twin.axhline(TARGET_P99_MS, color="red", linestyle="--", linewidth=1)
    twin.set_yscale("log")
    twin.set_ylabel("preparing p99 (ms, log; dashed: target)", color="tab:red")
    handles = right.get_legend_handles_labels()
    twin_handles = twin.get_legend_handles_labels()
    right.legend(
        handles[0] + twin_handles[0], handles[1] + twin_handles[1], fontsize=8, loc="upper left"
    )
    right.set_title("Throughput and p99 against N")
    right.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", default="1,100,1000", help="comma-separated session counts")
    parser.add_argument("--rate", type=float, default=20.0, help="provider events/s per session")
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per N")
    parser.add_argument("--provider", choices=("anthropic", "openai"), default="anthropic")
    parser.add_argument(
        "--transport",
        default="aiohttp",
        help="comma-separated HTTP clients to run each N over: aiohttp (the runtime's), httpx",
    )
    parser.add_argument(
        "--gc",
        choices=GC_MODES,
        default="daemon",
        help="daemon: the agent's start-up GC tuning (as the CLI does); default: CPython's",
    )
    parser.add_argument(
        "--ramp", type=float, default=1.0, help="seconds over which first prompts start"
    )
    parser.add_argument(
        "--warmup", type=float, default=1.5, help="seconds after the ramp before measuring"
    )
    parser.add_argument(
        "--inproc-duration",
        type=float,
        default=5.0,
        help="seconds of the unpaced in-process baseline",
    )
    parser.add_argument(
        "--no-http-baseline",
        action="store_true",
        help="skip the no-actor runs over HTTP (one per N)",
    )
    parser.add_argument(
        "--http-pools",
        type=int,
        default=1,
        help="what-if: spread streams over this many SDK clients / connection pools",
    )
    parser.add_argument(
        "--keepalive",
        type=int,
        default=None,
        help="what-if: max keep-alive connections per pool (0: one per session)",
    )
    parser.add_argument(
        "--gc-threshold", default=None, help="what-if: gc.set_threshold values, e.g. 50000,20,1000"
    )
    parser.add_argument(
        "--gc-freeze", action="store_true", help="what-if: gc.freeze() once the sessions are open"
    )
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=180.0,
        help="before each run wait up to this many seconds for other processes to go idle",
    )
    parser.add_argument(
        "--no-inproc-baseline",
        action="store_true",
        help="skip the in-process no-actor run (then no actor-overhead verdict)",
    )
    parser.add_argument(
        "--plot", type=Path, default=None, help="write a PNG of latency and N curves"
    )
    parser.add_argument("--report", type=Path, default=DEFAULT_REPORT)
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.sessions.split(",") if x.strip()]
    if not counts or min(counts) < 1:
        parser.error("--sessions needs positive counts")
    transports = [t.strip() for t in args.transport.split(",") if t.strip()]
    unknown = sorted(set(transports) - set(TRANSPORTS))
    if not transports or unknown:
        parser.error(f"--transport takes {', '.join(TRANSPORTS)} (got {args.transport!r})")

    if args.child:
        result = run_child(
            args.child,
            counts[0],
            args.rate,
            args.duration,
            args.provider,
            args.ramp,
            args.warmup,
            args.http_pools,
            args.keepalive,
            tuple(int(x) for x in args.gc_threshold.split(",")) if args.gc_threshold else None,
            args.gc_freeze,
            transports[0],
            args.gc,
        )
        h.write_report(args.child_out, result)
        return 0

    runs: list[dict[str, Any]] = []
    http_runs: list[dict[str, Any]] = []
    for n in counts:
        for transport in transports:
            print(f"actors/{transport:<8} N={n}: running ...", flush=True)
            runs.append(_spawn("actors", n, args, transport))
            if not args.no_http_baseline:
                print(f"direct-http/{transport:<8} N={n}: running ...", flush=True)
                http_runs.append(_spawn("direct-http", n, args, transport))
    baseline: dict[str, Any] | None = None
    if not args.no_inproc_baseline:
        print(f"direct-inproc N={max(counts)}: running ...", flush=True)
        baseline = _spawn("direct-inproc", max(counts), args)
    extra = [baseline] if baseline is not None else []

    print()
    print(
        f"provider {args.provider}, rate {args.rate:g} events/s per session, "
        f"{args.duration:g} s measured per N, {os.cpu_count()} cores"
    )
    print_table(runs + http_runs + extra)
    print()
    for r in runs + http_runs[-1:] + extra:
        print_breakdown(r)
    for r in runs:
        lag = r["stream_loop_lag_ms"]
        gcp = r["gc_pauses"]
        gc_max = max(
            (g["max_ms"] for k, g in gcp.items() if k.startswith("gen") and g["max_ms"]),
            default=None,
        )
        print(
            f"  {_label(r)} N={r['sessions']}: gc pause max {gc_max} ms; "
            f"stream-loop lag p50 {lag['p50']} / p99 {lag['p99']} "
            f"/ max {lag['max']} ms; gc gen2 {gcp['gen2']['count']}x "
            f"max {gcp['gen2']['max_ms']} ms, all gens {gcp['share_of_window']:.1%} of the window; "
            f"threads at peak {r['threads']['names_at_peak']}"
        )
    # Targets are judged on the runtime's own transport (the first one listed).
    targets = evaluate(
        [r for r in runs if r["transport"] == transports[0]],
        baseline,
        {r["sessions"]: r for r in http_runs if r["transport"] == transports[0]},
    )
    for n in counts:
        by_transport = {r["transport"]: r for r in runs if r["sessions"] == n}
        if len(by_transport) > 1:
            per_event = {t: r["cpu"]["per_event_us"] for t, r in by_transport.items()}
            print(f"  N={n}: CPU us per provider event by transport {per_event}")
    print()
    for t in targets.values():
        detail = {k: v for k, v in t.items() if k not in ("target", "verdict")}
        print(f"{t['verdict']}  {t['target']}  {detail}")
    report = {
        "benchmark": "load",
        "machine": h.machine_info(),
        "config": {
            "sessions": counts,
            "rate": args.rate,
            "duration": args.duration,
            "provider": args.provider,
            "transports": transports,
            "gc": args.gc,
            "ramp": args.ramp,
            "warmup": args.warmup,
            "inproc_duration": args.inproc_duration,
            "http_pools": args.http_pools,
            "keepalive": args.keepalive,
            "gc_threshold": args.gc_threshold,
            "gc_freeze": args.gc_freeze,
        },
        "runs": runs,
        "direct_http": http_runs,
        "direct_inproc": baseline,
        "targets": targets,
    }
    h.write_report(args.report, report)
    print(f"\nreport: {args.report}")
    if args.plot is not None and plot(args.plot, runs, http_runs):
        print(f"plot:   {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
