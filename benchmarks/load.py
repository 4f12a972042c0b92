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
the two compare within one run; ``aiohttp-asyncio`` and ``aiohttp-uvloop`` are
the runtime's client with its streams on that loop (``aiohttp`` alone: the
runtime's default, ``auto``). ``--gc default`` leaves the collector and
the allocator as CPython and glibc set them instead of the agent's start-up tuning
(``process_tuning``); ``MALLOC_MMAP_THRESHOLD_=131072 MALLOC_TRIM_THRESHOLD_=131072`` (glibc's
defaults) in the environment keeps only the allocator at its defaults.

``--mode cli`` drives the real command instead: ``toolprep acp --provider P
--base-url <loopback>`` in its own process (dummy API key, no retries), its
stdin and stdout on two pipes, with the very same editor side (``AcpClient``
and drain thread) and the same per-session loop. Its tools are the built-in
ones, so the loopback provider's tool calls are ``read_file`` of a 20-line
file in the session's directory (no permission needed). CPU is that
process's (``/proc/<pid>/stat``: all of it is the agent's), threads and RSS
its ``/proc/<pid>/status``. ``--mode embedded,cli`` runs both per N and
prints each figure of the CLI as a ratio of the embedded one of the same run;
``--cli-args`` passes options through to ``toolprep acp`` untouched.

``--host workers,ray`` puts the same embedded agent in front of other session
hosts as well, in the same run: the worker front over ``--shards`` worker
processes, and the same front over ``--shards`` shard actors of a Ray cluster
the run starts on 127.0.0.1 (``benchmarks._hosts``). Their runtimes are the
embedded run's (same provider, same no-op tool), so each figure set against
the embedded run's is what the host costs: ``added p50/p99`` is the latency
per preparing card it adds. CPU sums this process and the workers or shards
(not Ray's own daemons), threads and RSS are this process's.

Run: ``python -m benchmarks.load [--mode embedded,cli] [--host local,workers,ray] [--shards 2]
[--sessions 1,100,1000] [--rate 20] [--duration 10] [--provider anthropic|openai]
[--transport aiohttp,httpx,aiohttp-asyncio,aiohttp-uvloop] [--gc daemon|default]
[--cli-args=ARGS] [--plot out.png] [--report path]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Protocol

from benchmarks import _harness as h
from benchmarks._transports import TRANSPORTS, bench_config, build_bench_provider
from benchmarks.sse_server import BENCH_FILE

DEFAULT_REPORT = h.REPORTS / "load.json"

TARGET_P99_MS = 5.0
TARGET_THREADS = 32
TARGET_RSS_KIB = 50.0
TARGET_OVERHEAD = 1.5
TARGET_RATE_SHARE = 0.9
"""A run 'holds' N x R events/s when the server got at least this share of it out."""

AGENT_MODES = ("embedded", "cli")
"""``--mode``: the runtime in the benchmark's process, or the ``toolprep acp`` command
(once per ``--workers`` count)."""


def cli_label(workers: int) -> str:
    """How runs of ``toolprep acp --workers N`` are named in tables and reports."""
    return f"cli-w{workers}"


MODES = ("actors", "cli", "direct-http", "direct-inproc")
"""What one child run drives: ``actors`` is the embedded runtime, ``cli`` the command."""
RATIO_FIGURES = {
    "events/s": ("events_per_s",),
    "p99": ("preparing_latency_ms", "p99"),
    "us/ev": ("cpu", "per_event_us"),
    "threads": ("threads", "peak"),
    "KiB/session": ("rss_kib", "per_idle_session"),
}
"""Figures compared between modes of one run, as paths into a run's report."""
GC_MODES = ("daemon", "default")


# --- one measured run (child process) --------------------------------------------------------


class _Meter:
    """What the drain thread records; plain attributes, written by one thread only."""

    def __init__(self) -> None:
        self.recording = False
        self.frames = 0
        self.frames_window = 0
        self.preparing = 0
        self.preparing_window = 0
        self.latencies_ns: list[int] = []
        self.turns = 0
        self.turns_window = 0
        self.stop_reasons: dict[str, int] = {}
        self.prompt_errors = 0
        self.failed_tool_calls = 0
        self.in_flight = 0


class _AgentUnderTest(Protocol):
    """The agent a run drives over its stdio, wherever it runs, and the meters that fit it."""

    agent: str
    to_agent: int
    from_agent: int
    hosts_harness: bool
    """True when the editor-side threads run in the agent's process (their CPU is subtracted)."""

    @property
    def pids(self) -> tuple[int, ...]:
        """Processes besides this one whose CPU is the agent's."""
        ...

    def cpu_seconds(self) -> float: ...
    def threads(self) -> int: ...
    def rss_kib(self) -> int: ...
    def settled_rss_kib(self) -> int: ...
    def thread_names(self) -> dict[str, int]: ...
    def cpu_by_thread(self) -> dict[str, float]: ...
    def close_session(self, session_id: str) -> None: ...
    def shutdown(self) -> None: ...


class _EmbeddedAgent:
    """The real ``AcpAgent`` and ``JsonRpcConnection`` in this process, on two ``os.pipe``s."""

    agent = "embedded"
    hosts_harness = True

    @property
    def pids(self) -> tuple[int, ...]:
        return ()

    def __init__(self, runtime: Any, gc_mode: str, gc_threshold: tuple[int, ...] | None) -> None:
        import gc

        from toolprep.runtime.acp.agent import AcpAgent
        from toolprep.runtime.acp.jsonrpc import JsonRpcConnection
        from toolprep.runtime.process_tuning import tune_process_for_daemon

        self.runtime = runtime
        pipes = h.make_pipes()
        self.to_agent, self.from_agent = pipes.client_w, pipes.client_r
        self.connection = JsonRpcConnection(pipes.agent_in, pipes.agent_out)
        self._agent = AcpAgent(runtime, self.connection)  # kept alive here and by its handlers
        # Where the CLI tunes: runtime built, nothing served yet. The allocator part is
        # left out when MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ are set.
        self.malloc_tuned = gc_mode == "daemon" and tune_process_for_daemon()
        if gc_threshold:
            gc.set_threshold(*gc_threshold)
        self.connection.start()

    def cpu_seconds(self) -> float:
        return h.process_cpu_seconds()

    def threads(self) -> int:
        return h.os_threads()

    def rss_kib(self) -> int:
        return h.rss_kib()

    def settled_rss_kib(self) -> int:
        return h.settle_memory()

    def thread_names(self) -> dict[str, int]:
        return _thread_names()

    def cpu_by_thread(self) -> dict[str, float]:
        return h.cpu_by_thread()

    def close_session(self, session_id: str) -> None:
        self.runtime.close_session(session_id)

    def shutdown(self) -> None:
        self.runtime.shutdown()
        self.connection.close()


class _HostedAgent(_EmbeddedAgent):
    """The embedded agent over a worker or Ray host: the runtimes live in worker processes
    or shard actors on this machine, whose CPU counts as the agent's."""

    def __init__(
        self, host: Any, label: str, gc_mode: str, gc_threshold: tuple[int, ...] | None
    ) -> None:
        super().__init__(host, gc_mode, gc_threshold)
        self.agent = label
        self._pids = tuple(host.worker_pids())

    @property
    def pids(self) -> tuple[int, ...]:
        return self._pids

    def cpu_seconds(self) -> float:
        return h.process_cpu_seconds() + sum(h.process_cpu_seconds(pid) for pid in self._pids)


class _CliProcessAgent:
    """``toolprep acp`` in its own process: meters read ``/proc`` for it and its workers,
    nothing is subtracted."""

    hosts_harness = False

    def __init__(self, process: h.CliAgent, workers: int) -> None:
        self.agent = cli_label(workers)
        self.process = process
        self.to_agent = process.to_agent
        self.from_agent = process.from_agent

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(self.process.processes())

    def cpu_seconds(self) -> float:
        return self.process.cpu_seconds()

    def threads(self) -> int:
        return self.process.threads()

    def rss_kib(self) -> int:
        return self.process.rss_kib()

    def settled_rss_kib(self) -> int:
        time.sleep(0.5)  # another process's garbage cannot be collected from here: let it idle
        return self.process.rss_kib()

    def thread_names(self) -> dict[str, int]:
        return {}  # Python thread names are not visible from outside the process

    def cpu_by_thread(self) -> dict[str, float]:
        return {}

    def close_session(self, session_id: str) -> None:
        """ACP has no request to close a session: the warm-up session stays open, idle."""

    def shutdown(self) -> None:
        """The process ends by itself once its input does."""


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
    cli_args: Sequence[str] = (),
    workers: int = 1,
    host: str = "local",
    shards: int = 2,
) -> dict[str, Any]:
    """Run one configuration in this process (``cli``: against a ``toolprep acp`` child;
    ``host``: the sessions behind the embedded agent in worker processes or Ray shards)."""
    import gc

    from benchmarks._direct import DirectRuntime, InProcessProvider
    from toolprep.runtime.config import ModelRoute
    from toolprep.runtime.host import Runtime

    with ExitStack() as stack:
        gc_pauses = h.GcPauses().install()
        stack.callback(gc_pauses.remove)
        threads_before = h.os_threads()
        rss_start = h.rss_kib()
        tool = "read_file" if mode == "cli" else "bench_tool"
        server = (
            stack.enter_context(h.loopback_server(rate, tool=tool))
            if mode != "direct-inproc"
            else None
        )
        base_url = (
            server.base_url + ("/v1" if provider_name == "openai" else "")
            if server is not None
            else ""
        )
        inproc: InProcessProvider | None = None
        lag: h.LoopLagProbe | None = None
        event_loop: str | None = None  # known only for a runtime in this process
        agent: _AgentUnderTest
        if mode == "cli":
            command_args = [*cli_args, "--workers", str(workers)]
            process = stack.enter_context(h.cli_agent(provider_name, base_url, command_args))
            agent = _CliProcessAgent(process, workers)
        elif host != "local":
            from benchmarks._hosts import host_label, session_host

            hosted = stack.enter_context(
                session_host(host, shards, provider_name, base_url, sessions, transport)
            )
            agent = _HostedAgent(hosted, host_label(host, shards), gc_mode, gc_threshold)
        else:
            registry = h.bench_registry()
            config = bench_config(transport)
            if server is not None:
                provider: Any = build_bench_provider(
                    provider_name, base_url, sessions, pools, keepalive, transport
                )
            else:
                inproc = InProcessProvider("openai" if provider_name == "openai" else "anthropic")
                provider = inproc
            routes = [ModelRoute(provider, "bench")]
            runtime: Any = (
                Runtime(routes, registry, config)
                if mode == "actors"
                else DirectRuntime(routes, registry, config)
            )
            stream_loop = _stream_loop(runtime)
            event_loop = h.loop_kind(stream_loop)
            lag = h.LoopLagProbe(stream_loop).start()
            agent = _EmbeddedAgent(runtime, gc_mode, gc_threshold)

        def events_now() -> int:
            if server is not None:
                return int(server.stats()["events_sent"])
            assert inproc is not None
            return inproc.events

        meter = _Meter()
        running = threading.Event()
        running.set()
        lock = threading.Lock()

        def on_update(session_id: str, update: dict[str, Any], read_ns: int) -> None:
            meter.frames += 1
            if update.get("status") == "failed":
                meter.failed_tool_calls += 1  # a run whose tool calls fail measures the wrong path
            stamp = h.preparing_stamp_ns(update)
            if stamp is not None:
                meter.preparing += 1
            if not meter.recording:
                return
            meter.frames_window += 1
            if stamp is not None:
                meter.preparing_window += 1
                meter.latencies_ns.append(read_ns - stamp)

        client = h.AcpClient(agent.to_agent, agent.from_agent, on_update)
        stack.callback(client.close_input)  # before the agent is reaped: its input must end
        client.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="toolprep-load-"))
        Path(workdir, BENCH_FILE).write_text(
            "".join(f"line {i}: alpha beta gamma delta\n" for i in range(1, 21)), encoding="utf-8"
        )
        threads_started = agent.threads()

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
        agent.close_session(warm)
        rss_idle_before = agent.settled_rss_kib()
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
        rss_idle_after = agent.settled_rss_kib()
        if gc_freeze:
            gc.freeze()  # everything alive now is start-up state: keep it out of every later scan
        threads_idle = agent.threads()

        peak_threads = threads_idle
        peak_processes = 1  # the embedded agent is this process
        peak_rss = rss_idle_after
        threads_at_peak = agent.thread_names()

        def sample() -> None:
            nonlocal peak_threads, peak_rss, threads_at_peak, peak_processes
            peak_processes = max(peak_processes, len(agent.pids))
            threads = agent.threads()
            if threads > peak_threads:
                peak_threads = threads
                threads_at_peak = agent.thread_names()
            peak_rss = max(peak_rss, agent.rss_kib())

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
        cpu0 = agent.cpu_seconds()
        harness0 = sum(h.thread_cpu_seconds(t) for t in harness)
        by_thread0 = agent.cpu_by_thread()
        server_cpu0 = server.cpu_seconds() if server is not None else 0.0
        foreign = h.ForeignLoad(*([server.process.pid] if server is not None else []), *agent.pids)
        t0 = time.monotonic()
        meter.recording = gc_pauses.recording = True
        if lag is not None:
            lag.recording = True
        window_end = t0 + duration
        while time.monotonic() < window_end:
            sample()
            time.sleep(min(0.1, max(0.0, window_end - time.monotonic())))
        meter.recording = gc_pauses.recording = False
        if lag is not None:
            lag.recording = False
        t1 = time.monotonic()
        events1 = events_now()
        cpu1 = agent.cpu_seconds()
        harness1 = sum(h.thread_cpu_seconds(t) for t in harness)
        by_thread1 = agent.cpu_by_thread()
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
        if lag is not None:
            lag.stop()
        agent.shutdown()
        client.close_input()
        client.wait_drained(15)

    window = t1 - t0
    events = events1 - events0
    agent_cpu = cpu1 - cpu0
    harness_cpu = harness1 - harness0
    runtime_cpu = agent_cpu - harness_cpu if agent.hosts_harness else agent_cpu
    with_harness = agent_cpu if agent.hosts_harness else agent_cpu + harness_cpu
    latencies = meter.latencies_ns
    embedded = agent.agent == "embedded"
    return {
        "mode": mode,
        "agent": agent.agent,
        "host": host if mode != "cli" else None,
        "cli_args": list(cli_args) if not embedded else None,
        "workers": workers if not embedded else None,
        "processes": peak_processes,
        "tool": tool,
        "transport": transport if mode != "direct-inproc" else None,
        "event_loop": event_loop,
        "gc": gc_mode if embedded else "daemon",
        "malloc_tuned": agent.malloc_tuned if isinstance(agent, _EmbeddedAgent) else None,
        "gc_threshold_in_effect": list(gc.get_threshold()) if embedded else None,
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
            "before_runtime": threads_before if embedded else None,
            "agent_started": threads_started,
            "idle_with_sessions": threads_idle,
            "peak": peak_threads,
            "harness": len(harness) if embedded else 0,
            "names_at_peak": threads_at_peak,
        },
        "rss_kib": {
            "process_start": rss_start if embedded else None,
            "before_sessions": rss_idle_before,
            "after_sessions": rss_idle_after,
            "per_idle_session": round((rss_idle_after - rss_idle_before) / sessions, 2),
            "peak_under_load": peak_rss,
        },
        "cpu": {
            "process_s": round(agent_cpu, 3),
            "harness_s": round(harness_cpu, 3),
            "runtime_s": round(runtime_cpu, 3),
            "runtime_cores": round(runtime_cpu / window, 3),
            "per_event_us": round(runtime_cpu / events * 1e6, 2) if events else None,
            "per_event_us_with_harness": round(with_harness / events * 1e6, 2) if events else None,
            "by_thread_s": h.cpu_delta(by_thread0, by_thread1),
            "loopback_server_s": round(server_cpu1 - server_cpu0, 3),
            "other_processes_cores": foreign_cores,
        },
        "stream_loop_lag_ms": h.summarize_ms(lag.lags_ns) if lag is not None else None,
        "gc_pauses": gc_pauses.summary(window) if embedded else None,
        "what_if": {
            "http_pools": pools,
            "keepalive": keepalive,
            "gc_threshold": gc_threshold,
            "gc_freeze": gc_freeze,
        },
        # The whole run, warm-up and wind-down included: what happened, whatever the window saw.
        "totals": {
            "frames": meter.frames,
            "preparing_frames": meter.preparing,
            "turns": meter.turns,
        },
        "stop_reasons": meter.stop_reasons,
        "prompt_errors": meter.prompt_errors,
        "failed_tool_calls": meter.failed_tool_calls,
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
    mode: str,
    sessions: int,
    args: argparse.Namespace,
    transport: str = "aiohttp",
    workers: int = 1,
    host: str = "local",
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
        + ([f"--cli-args={args.cli_args}"] if mode == "cli" and args.cli_args else [])
        + (["--child-workers", str(workers)] if mode == "cli" else [])
        + (["--child-host", host, "--shards", str(args.shards)] if host != "local" else [])
    )
    try:
        subprocess.run(
            command, cwd=h.REPO, check=True, timeout=duration + args.ramp + args.warmup + 240
        )
        result: dict[str, Any] = json.loads(Path(out_path).read_text(encoding="utf-8"))
        return result
    finally:
        os.unlink(out_path)


def _figure(run: dict[str, Any], path: Sequence[str]) -> Any:
    value: Any = run
    for key in path:
        value = value[key]
    return value


def mode_ratios(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each CLI run's figures over the embedded run of the same N and transport (same run)."""
    embedded = {(r["sessions"], r["transport"]): r for r in runs if r["agent"] == "embedded"}
    out: list[dict[str, Any]] = []
    for run in runs:
        base = embedded.get((run["sessions"], run["transport"]))
        if run["agent"] == "embedded" or base is None:
            continue
        latency, base_latency = run["preparing_latency_ms"], base["preparing_latency_ms"]
        out.append(
            {
                "mode": _label(run),
                "against": base["mode"],
                "sessions": run["sessions"],
                "transport": run["transport"],
                "ratios": {
                    name: _ratio(_figure(run, path), _figure(base, path))
                    for name, path in RATIO_FIGURES.items()
                },
                "added_latency_ms": {
                    q: _difference(latency[q], base_latency[q]) for q in ("p50", "p99")
                },
            }
        )
    return out


def _difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 3)


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
    name = run["agent"] if run.get("workers") else run["mode"]
    transport = run.get("transport")
    return f"{name}/{transport}" if transport else name


def print_breakdown(run: dict[str, Any]) -> None:
    busy = sorted(run["cpu"]["by_thread_s"].items(), key=lambda kv: -kv[1])
    window = run["window_s"]
    parts = ", ".join(
        f"{name} {sec / window * 100:.0f}%" for name, sec in busy if sec / window >= 0.01
    ) or ("not visible from outside the process" if run["agent"] != "embedded" else "-")
    print(
        f"  {_label(run)} N={run['sessions']}: CPU by thread (share of one core): {parts}; "
        f"loopback server {run['cpu']['loopback_server_s'] / window * 100:.0f}%"
    )


def plot(path: Path, runs: list[dict[str, Any]], http_runs: list[dict[str, Any]]) -> bool:
    """Latency distribution per run, and events/s and p99 against N, one line per mode.

    Needs matplotlib.
    """
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
            sample,
            ys,
            label=f"{_label(r)} N={r['sessions']} (p99 {lat['p99']:.2f} ms, n={lat['count']})",
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
    left.set_title("Preparing-card latency (CDF)")
    left.legend(fontsize=8, loc="lower right")
    left.grid(True, which="both", alpha=0.3)

    lines: dict[str, list[dict[str, Any]]] = {}
    for r in runs + http_runs:
        lines.setdefault(_label(r), []).append(r)
    twin = right.twinx()
    for (label, line), marker in zip(lines.items(), "osD^v<>", strict=False):
        line.sort(key=lambda r: r["sessions"])
        ns = [r["sessions"] for r in line]
        right.plot(ns, [r["events_per_s"] for r in line], f"{marker}:", label=f"events/s ({label})")
        twin.plot(
            ns,
            [r["preparing_latency_ms"]["p99"] or 0 for r in line],
            f"{marker}-",
            label=f"preparing p99 ms ({label})",
        )
    offered = sorted({(r["sessions"], r["offered_events_per_s"]) for r in runs})
    right.plot(
        [n for n, _ in offered],
        [o for _, o in offered],
        "--",
        color="grey",
        alpha=0.5,
        label="offered N x rate",
    )
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("concurrent sessions N (log)")
    right.set_ylabel("provider events/s (log, dotted)")
    twin.axhline(TARGET_P99_MS, color="red", linestyle="--", linewidth=1)
    twin.set_yscale("log")
    twin.set_ylabel("preparing p99 (ms, log, solid; dashed: target)")
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
    parser.add_argument(
        "--mode",
        default="embedded",
        help="comma-separated agents to drive: embedded (the runtime in this process), "
        "cli (the toolprep acp command in its own process)",
    )
    parser.add_argument(
        "--cli-args",
        default="",
        help="extra options for toolprep acp in cli mode, one shell-quoted string "
        "(write --cli-args='--opt value' when it starts with a dash)",
    )
    parser.add_argument(
        "--workers",
        default="1,2",
        help="comma-separated --workers values to run the cli mode with (1: no worker processes)",
    )
    parser.add_argument(
        "--host",
        default="local",
        help="comma-separated session hosts behind the embedded agent: local (the runtime in "
        "this process; always run), workers (worker processes), ray (shard actors on a local "
        "Ray cluster; needs the ray extra)",
    )
    parser.add_argument(
        "--shards", type=int, default=2, help="worker processes / Ray shards for --host"
    )
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
        help="daemon: the agent's start-up tuning of the collector and the allocator "
        "(as the CLI does); default: CPython's and glibc's",
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
    parser.add_argument("--child-workers", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--child-host", default="local", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.sessions.split(",") if x.strip()]
    if not counts or min(counts) < 1:
        parser.error("--sessions needs positive counts")
    transports = [t.strip() for t in args.transport.split(",") if t.strip()]
    unknown = sorted(set(transports) - set(TRANSPORTS))
    if not transports or unknown:
        parser.error(f"--transport takes {', '.join(TRANSPORTS)} (got {args.transport!r})")
    modes = [m.strip() for m in args.mode.split(",") if m.strip()]
    unknown = sorted(set(modes) - set(AGENT_MODES))
    if not modes or unknown:
        parser.error(f"--mode takes {', '.join(AGENT_MODES)} (got {args.mode!r})")
    try:
        worker_counts = [int(x) for x in args.workers.split(",") if x.strip()]
    except ValueError:
        worker_counts = []
    if not worker_counts or min(worker_counts) < 1:
        parser.error(f"--workers takes positive counts (got {args.workers!r})")
    hosts = [x.strip() for x in args.host.split(",") if x.strip()]
    if not hosts or set(hosts) - {"local", "workers", "ray"} or args.shards < 1:
        parser.error(f"--host takes local, workers, ray and --shards N >= 1 (got {args.host!r})")
    other_hosts = [x for x in hosts if x != "local"]
    agents = [
        *(["embedded"] if "embedded" in modes else []),
        *([cli_label(w) for w in worker_counts] if "cli" in modes else []),
    ]
    try:
        cli_args = shlex.split(args.cli_args)
    except ValueError as exc:
        parser.error(f"--cli-args is not a valid shell-quoted string: {exc}")

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
            cli_args,
            args.child_workers,
            args.child_host,
            args.shards,
        )
        h.write_report(args.child_out, result)
        return 0

    runs: list[dict[str, Any]] = []
    http_runs: list[dict[str, Any]] = []
    for n in counts:
        if "embedded" in modes:
            for transport in transports:
                print(f"actors/{transport:<8} N={n}: running ...", flush=True)
                runs.append(_spawn("actors", n, args, transport))
                if not args.no_http_baseline:
                    print(f"direct-http/{transport:<8} N={n}: running ...", flush=True)
                    http_runs.append(_spawn("direct-http", n, args, transport))
            for host in other_hosts:  # on the runtime's own transport (the first listed)
                print(f"{host}-{args.shards}/{transports[0]} N={n}: running ...", flush=True)
                runs.append(_spawn("actors", n, args, transports[0], host=host))
        if "cli" in modes:
            # The command's provider always uses the runtime's own transport (the first listed).
            for workers in worker_counts:
                print(f"{cli_label(workers)}/aiohttp N={n}: running ...", flush=True)
                runs.append(_spawn("cli", n, args, "aiohttp", workers))
    baseline: dict[str, Any] | None = None
    if "embedded" in modes and not args.no_inproc_baseline:
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
        if lag is None or gcp is None:
            continue  # not measurable from outside the agent's process
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
    # Targets are judged per mode on the runtime's own transport (the first one listed).
    targets_by_mode = {
        mode: evaluate(
            [r for r in runs if r["agent"] == mode and r["transport"] in (transports[0], None)]
            or [r for r in runs if r["agent"] == mode],
            baseline,
            {r["sessions"]: r for r in http_runs if r["transport"] == transports[0]},
        )
        for mode in agents
    }
    targets = targets_by_mode[agents[0]]
    ratios = mode_ratios(runs)
    for ratio in ratios:
        figures = ", ".join(f"{k} {_fmt(v, '.2f')}x" for k, v in ratio["ratios"].items())
        added = ratio["added_latency_ms"]
        print(
            f"  N={ratio['sessions']}: {ratio['mode']} / embedded {ratio['against']} "
            f"({ratio['transport']}): {figures}; added p50 {_fmt(added['p50'], '+.2f')} ms, "
            f"p99 {_fmt(added['p99'], '+.2f')} ms"
        )
    for n in counts:
        by_transport = {
            r["transport"]: r for r in runs if r["sessions"] == n and r["agent"] == "embedded"
        }
        if len(by_transport) > 1:
            per_event = {t: r["cpu"]["per_event_us"] for t, r in by_transport.items()}
            print(f"  N={n}: CPU us per provider event by transport {per_event}")
    for mode, mode_targets in targets_by_mode.items():
        print()
        for t in mode_targets.values():
            detail = {k: v for k, v in t.items() if k not in ("target", "verdict")}
            prefix = f"[{mode}] " if len(agents) > 1 else ""
            print(f"{prefix}{t['verdict']}  {t['target']}  {detail}")
    report = {
        "benchmark": "load",
        "machine": h.machine_info(),
        "config": {
            "modes": modes,
            "hosts": hosts,
            "shards": args.shards,
            "workers": worker_counts,
            "cli_args": cli_args,
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
        "targets_by_mode": targets_by_mode,
        "mode_ratios": ratios,
    }
    h.write_report(args.report, report)
    print(f"\nreport: {args.report}")
    if args.plot is not None and plot(args.plot, runs, http_runs):
        print(f"plot:   {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
