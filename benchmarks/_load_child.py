"""One measured run of ``benchmarks.load``, in a fresh interpreter (``python -m
benchmarks._load_child SPEC OUT``).

The interpreter may be another revision's (``--baseline-python``): this module imports
only the installed ``toolprep`` and the benchmark's own files, and the loopback provider
is started by the parent, which hands over its address and pid in the spec.

Phases, in order: the agent starts (the runtime in this process, behind a worker or Ray
host, or the ``toolprep acp`` command); N sessions open (their RSS measured idle); first
prompts start spread over ``ramp`` s; after ``warmup`` s the window of ``duration`` s is
measured while every session loops prompts; then prompts stop and running turns are
answered.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from benchmarks import _harness as h

__all__ = ["ChildSpec", "main", "run_child"]

ChildMode = Literal["actors", "cli"]


@dataclass(frozen=True)
class ChildSpec:
    """Everything one run needs, written as JSON by the parent."""

    mode: ChildMode
    sessions: int
    rate: float
    duration: float
    provider: str
    base_url: str
    server_port: int
    server_pid: int
    ramp: float = 1.0
    warmup: float = 1.5
    pools: int = 1
    keepalive: int | None = None
    gc_threshold: tuple[int, ...] | None = None
    gc_freeze: bool = False
    transport: str = "aiohttp"
    gc_mode: str = "daemon"
    cli_args: tuple[str, ...] = ()
    workers: int = 1
    host: str = "local"
    shards: int = 2
    telemetry_environ: dict[str, str] | None = None
    """``OTEL_*`` variables for the runtime's OpenTelemetry (traces and metrics over OTLP);
    None: telemetry off, the runtime's default observer."""

    @classmethod
    def against(cls, server: h.LoopbackServer, provider: str, **fields: Any) -> ChildSpec:
        """A run against ``server`` in ``provider``'s wire (OpenAI's base URL ends in /v1)."""
        return cls(
            provider=provider,
            base_url=server.base_url + ("/v1" if provider == "openai" else ""),
            server_port=server.port,
            server_pid=server.process.pid,
            **fields,
        )

    @classmethod
    def from_json(cls, text: str) -> ChildSpec:
        data = json.loads(text)
        if data.get("gc_threshold") is not None:
            data["gc_threshold"] = tuple(data["gc_threshold"])
        data["cli_args"] = tuple(data.get("cli_args", ()))
        return cls(**data)

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def cli_label(workers: int) -> str:
    """How runs of ``toolprep acp --workers N`` are named in tables and reports."""
    return f"cli-w{workers}"


# --- the agent under test -------------------------------------------------------------------


class AgentUnderTest(Protocol):
    """The agent a run drives over its stdio, wherever it runs, and the meters that fit it."""

    agent: str
    to_agent: int
    from_agent: int
    hosts_harness: bool
    """True when the editor-side threads run in the agent's process (their CPU is subtracted)."""
    malloc_tuned: bool | None

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


class EmbeddedAgent:
    """The real ``AcpAgent`` and ``JsonRpcConnection`` in this process, on two ``os.pipe``s."""

    agent = "embedded"
    hosts_harness = True

    @property
    def pids(self) -> tuple[int, ...]:
        return ()

    def __init__(self, runtime: Any, gc_mode: str, gc_threshold: tuple[int, ...] | None) -> None:
        from toolprep.runtime.acp.agent import AcpAgent
        from toolprep.runtime.acp.jsonrpc_connection import JsonRpcConnection
        from toolprep.runtime.process.tuning import tune_process_for_daemon

        self.runtime = runtime
        pipes = h.make_pipes()
        self.to_agent, self.from_agent = pipes.client_w, pipes.client_r
        self.connection = JsonRpcConnection(pipes.agent_in, pipes.agent_out)
        self._agent = AcpAgent(runtime, self.connection)  # kept alive here and by its handlers
        # Where the CLI tunes: runtime built, nothing served yet. The allocator part is
        # left out when MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ are set.
        self.malloc_tuned: bool | None = gc_mode == "daemon" and tune_process_for_daemon()
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
        names: dict[str, int] = {}
        for thread in threading.enumerate():
            key = h._fold_name(thread.name)
            names[key] = names.get(key, 0) + 1
        return names

    def cpu_by_thread(self) -> dict[str, float]:
        return h.cpu_by_thread()

    def close_session(self, session_id: str) -> None:
        self.runtime.close_session(session_id)

    def shutdown(self) -> None:
        self.runtime.shutdown()
        self.connection.close()


class HostedAgent(EmbeddedAgent):
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


class CliProcessAgent:
    """``toolprep acp`` in its own process: meters read ``/proc`` for it and its workers,
    nothing is subtracted."""

    hosts_harness = False
    malloc_tuned: bool | None = None

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


def _stream_loop(runtime: Any) -> Any:
    """The asyncio loop every provider stream runs on (the stream reader's)."""
    deadline = time.monotonic() + 10
    while runtime.reader_state.loop is None and time.monotonic() < deadline:
        time.sleep(0.01)  # the StreamReader creates it in its own thread at start
    if runtime.reader_state.loop is None:
        raise RuntimeError("the stream reader's loop never started")
    return runtime.reader_state.loop


@dataclass
class _Started:
    agent: AgentUnderTest
    lag: h.LoopLagProbe | None = None
    event_loop: str | None = None  # known only for a runtime in this process


def _start_agent(stack: ExitStack, spec: ChildSpec) -> _Started:
    """The agent ``spec`` names, stopped when ``stack`` closes."""
    if spec.mode == "cli":
        command_args = [*spec.cli_args, "--workers", str(spec.workers)]
        process = stack.enter_context(h.cli_agent(spec.provider, spec.base_url, command_args))
        return _Started(CliProcessAgent(process, spec.workers))
    if spec.host != "local":
        from benchmarks._hosts import host_label, session_host

        hosted = stack.enter_context(
            session_host(
                spec.host, spec.shards, spec.provider, spec.base_url, spec.sessions, spec.transport
            )
        )
        label = host_label(spec.host, spec.shards)
        return _Started(HostedAgent(hosted, label, spec.gc_mode, spec.gc_threshold))
    from benchmarks._transports import bench_config, build_bench_provider

    try:
        from toolprep.runtime.providers.routes import ModelRoute
    except ImportError:  # a baseline install from before ModelRoute left the stream reader
        from toolprep.actors.stream_reader import (  # type: ignore[attr-defined]
            ModelRoute,
        )
    from toolprep.runtime.hosting.runtime import Runtime

    provider = build_bench_provider(
        spec.provider, spec.base_url, spec.sessions, spec.pools, spec.keepalive, spec.transport
    )
    observer = {} if spec.telemetry_environ is None else {"observer": _telemetry(stack, spec)}
    runtime = Runtime(
        [ModelRoute(provider, "bench")],
        h.bench_registry(),
        bench_config(spec.transport),
        **observer,
    )
    stream_loop = _stream_loop(runtime)
    lag = h.LoopLagProbe(stream_loop).start()
    agent = EmbeddedAgent(runtime, spec.gc_mode, spec.gc_threshold)
    return _Started(agent, lag, h.loop_kind(stream_loop))


def _telemetry(stack: ExitStack, spec: ChildSpec) -> Any:
    """The observer of the real OpenTelemetry pipeline, as ``serve`` starts it with OTLP on:
    traces and metrics exported on the SDK's own threads, the Prometheus reader beside them.
    Shut down (its last export flushed) when ``stack`` closes."""
    from toolprep.runtime.telemetry.settings import TelemetrySettings
    from toolprep.runtime.telemetry.setup import start_telemetry

    os.environ.update(spec.telemetry_environ or {})  # the SDK's exporters read them
    settings = TelemetrySettings(
        disabled=False, otlp_metrics=True, otlp_protocol="http/protobuf", otlp_traces=True
    )
    telemetry = start_telemetry(settings, prometheus=True)
    if not telemetry.on:  # never measure "on" with telemetry silently off
        raise RuntimeError(f"telemetry did not start: {telemetry.page('')}")
    stack.callback(telemetry.shutdown)
    return telemetry.observer


# --- the editor side: every session loops prompts ---------------------------------------------


@dataclass
class Meter:
    """What the drain thread records; written by the drain thread, except ``in_flight``."""

    recording: bool = False
    frames: int = 0
    frames_window: int = 0
    preparing: int = 0
    preparing_window: int = 0
    latencies_ns: list[int] = field(default_factory=list)
    turns: int = 0
    turns_window: int = 0
    stop_reasons: dict[str, int] = field(default_factory=dict)
    prompt_errors: int = 0
    failed_tool_calls: int = 0
    in_flight: int = 0

    def on_update(self, _session_id: str, update: dict[str, Any], read_ns: int) -> None:
        self.frames += 1
        if update.get("status") == "failed":
            self.failed_tool_calls += 1  # a run whose tool calls fail measures the wrong path
        stamp = h.preparing_stamp_ns(update)
        if stamp is not None:
            self.preparing += 1
        if not self.recording:
            return
        self.frames_window += 1
        if stamp is not None:
            self.preparing_window += 1
            self.latencies_ns.append(read_ns - stamp)

    def answered(self, response: dict[str, Any]) -> None:
        self.turns += 1
        if self.recording:
            self.turns_window += 1
        result = response.get("result")
        if not isinstance(result, dict):
            self.prompt_errors += 1
            return
        reason = str(result.get("stopReason"))
        self.stop_reasons[reason] = self.stop_reasons.get(reason, 0) + 1


class PromptLoop:
    """Sends each session's next prompt as soon as its last one is answered, until stopped."""

    def __init__(self, client: h.AcpClient, meter: Meter) -> None:
        self.client = client
        self.meter = meter
        self.running = threading.Event()
        self.running.set()
        self._lock = threading.Lock()

    def prompt(self, session_id: str) -> None:
        with self._lock:
            self.meter.in_flight += 1

        def done(response: dict[str, Any], _read_ns: int) -> None:
            with self._lock:
                self.meter.in_flight -= 1
            self.meter.answered(response)
            if self.running.is_set():
                self.prompt(session_id)

        self.client.request(
            "session/prompt",
            {"sessionId": session_id, "prompt": [{"type": "text", "text": "go"}]},
            done,
        )

    def in_flight(self) -> int:
        with self._lock:
            return self.meter.in_flight


class Peaks:
    """The highest thread count, process count and RSS seen while sampling."""

    def __init__(self, agent: AgentUnderTest, threads: int, rss: int) -> None:
        self.agent = agent
        self.threads = threads
        self.processes = 1  # the embedded agent is this process
        self.rss = rss
        self.names_at_peak = agent.thread_names()

    def sample(self) -> None:
        self.processes = max(self.processes, len(self.agent.pids))
        threads = self.agent.threads()
        if threads > self.threads:
            self.threads = threads
            self.names_at_peak = self.agent.thread_names()
        self.rss = max(self.rss, self.agent.rss_kib())

    def sample_until(self, deadline: float) -> None:
        h.sample_until(self.sample, deadline)


@dataclass(frozen=True)
class Reading:
    """Counters at one edge of the measured window."""

    at: float
    events: int
    agent_cpu: float
    harness_cpu: float
    by_thread: dict[str, float]
    server_cpu: float

    @classmethod
    def take(
        cls, spec: ChildSpec, agent: AgentUnderTest, harness: list[threading.Thread]
    ) -> Reading:
        return cls(
            time.monotonic(),
            int(h.server_stats(spec.server_port)["events_sent"]),
            agent.cpu_seconds(),
            sum(h.thread_cpu_seconds(t) for t in harness),
            agent.cpu_by_thread(),
            h.process_cpu_seconds(spec.server_pid),
        )


@dataclass
class Idle:
    """The agent before load: threads and RSS around opening the sessions."""

    threads_before: int
    rss_start: int
    threads_started: int = 0
    rss_before: int = 0
    rss_after: int = 0
    threads_idle: int = 0


def _open_sessions(
    client: h.AcpClient, agent: AgentUnderTest, spec: ChildSpec, workdir: str, idle: Idle
) -> list[str]:
    """A throw-away session first (lazy one-time set-up is not billed to sessions), then N."""
    warm = client.call("session/new", {"cwd": workdir, "mcpServers": []})["result"]["sessionId"]
    agent.close_session(warm)
    idle.rss_before = agent.settled_rss_kib()
    opened: list[str] = []
    all_open = threading.Event()

    def got_session(response: dict[str, Any], _read_ns: int) -> None:
        opened.append(response["result"]["sessionId"])
        if len(opened) == spec.sessions:
            all_open.set()

    for _ in range(spec.sessions):
        client.request("session/new", {"cwd": workdir, "mcpServers": []}, got_session)
    if not all_open.wait(60):
        raise RuntimeError(f"only {len(opened)} of {spec.sessions} sessions opened")
    time.sleep(0.3)  # let the roles take in SessionOpened / AttachSink
    idle.rss_after = agent.settled_rss_kib()
    if spec.gc_freeze:
        gc.freeze()  # everything alive now is start-up state: keep it out of every later scan
    idle.threads_idle = agent.threads()
    return opened


def _ramp(opened: list[str], loop: PromptLoop, peaks: Peaks, spread: float) -> None:
    """Start every session's first prompt at its offset in ``spread`` s."""
    start = time.monotonic()
    for session_id, offset in zip(opened, h.stagger(len(opened), spread), strict=False):
        delay = start + offset - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        loop.prompt(session_id)
        if len(opened) < 50 or hash(session_id) % 50 == 0:
            peaks.sample()


def _wind_down(loop: PromptLoop, peaks: Peaks) -> int:
    """Stop new prompts and wait (bounded) for the running ones; return those still running."""
    loop.running.clear()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and loop.in_flight():
        peaks.sample()
        time.sleep(0.1)
    return loop.in_flight()


@dataclass
class Window:
    """The measured window's readings and what else was seen over it."""

    first: Reading
    last: Reading
    foreign_cores: float
    harness_threads: int

    @property
    def seconds(self) -> float:
        return self.last.at - self.first.at

    @property
    def events(self) -> int:
        return self.last.events - self.first.events


def _measure(
    spec: ChildSpec,
    started: _Started,
    client: h.AcpClient,
    meter: Meter,
    peaks: Peaks,
    gc_pauses: h.GcPauses,
) -> Window:
    agent = started.agent
    harness = [threading.main_thread(), *client.harness_threads()]
    first = Reading.take(spec, agent, harness)
    foreign = h.ForeignLoad(spec.server_pid, *agent.pids)
    meter.recording = gc_pauses.recording = True
    if started.lag is not None:
        started.lag.recording = True
    peaks.sample_until(first.at + spec.duration)
    meter.recording = gc_pauses.recording = False
    if started.lag is not None:
        started.lag.recording = False
    last = Reading.take(spec, agent, harness)
    return Window(first, last, foreign.cores(), len(harness))


def run_child(spec: ChildSpec) -> dict[str, Any]:
    """Run one configuration in this process and return its report."""
    with ExitStack() as stack:
        gc_pauses = h.GcPauses().install()
        stack.callback(gc_pauses.remove)
        idle = Idle(h.os_threads(), h.rss_kib())
        started = _start_agent(stack, spec)
        agent = started.agent
        meter = Meter()
        client = h.AcpClient(agent.to_agent, agent.from_agent, meter.on_update)
        stack.callback(client.close_input)  # before the agent is reaped: its input must end
        client.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="toolprep-load-"))
        h.write_bench_file(workdir)
        idle.threads_started = agent.threads()
        opened = _open_sessions(client, agent, spec, workdir, idle)
        peaks = Peaks(agent, idle.threads_idle, idle.rss_after)
        loop = PromptLoop(client, meter)
        _ramp(opened, loop, peaks, spec.ramp)
        peaks.sample_until(time.monotonic() + spec.warmup)
        window = _measure(spec, started, client, meter, peaks, gc_pauses)
        unfinished = _wind_down(loop, peaks)
        if started.lag is not None:
            started.lag.stop()
        agent.shutdown()
        client.close_input()
        client.wait_drained(15)
    report = _report(spec, started, window, meter, peaks, idle)
    report["unfinished_turns_at_exit"] = unfinished
    report["client_errors"] = len(client.errors)
    embedded = agent.agent == "embedded"
    report["gc_pauses"] = gc_pauses.summary(window.seconds) if embedded else None
    return report


# --- the report ---------------------------------------------------------------------------------


def _cpu_figures(spec: ChildSpec, agent: AgentUnderTest, window: Window) -> dict[str, Any]:
    first, last = window.first, window.last
    agent_cpu = last.agent_cpu - first.agent_cpu
    harness_cpu = last.harness_cpu - first.harness_cpu
    runtime_cpu = agent_cpu - harness_cpu if agent.hosts_harness else agent_cpu
    with_harness = agent_cpu if agent.hosts_harness else agent_cpu + harness_cpu
    events, seconds = window.events, window.seconds
    return {
        "process_s": round(agent_cpu, 3),
        "harness_s": round(harness_cpu, 3),
        "harness_cores": round(harness_cpu / seconds, 3),
        "runtime_s": round(runtime_cpu, 3),
        "runtime_cores": round(runtime_cpu / seconds, 3),
        "per_event_us": round(runtime_cpu / events * 1e6, 2) if events else None,
        "per_event_us_with_harness": round(with_harness / events * 1e6, 2) if events else None,
        "by_thread_s": h.cpu_delta(first.by_thread, last.by_thread),
        "loopback_server_s": round(last.server_cpu - first.server_cpu, 3),
        "other_processes_cores": window.foreign_cores,
    }


def _embedded_only(embedded: bool, value: Any) -> Any:
    return value if embedded else None


def _report(
    spec: ChildSpec, started: _Started, window: Window, meter: Meter, peaks: Peaks, idle: Idle
) -> dict[str, Any]:
    agent = started.agent
    embedded = agent.agent == "embedded"
    seconds, latencies = window.seconds, meter.latencies_ns
    return {
        "mode": spec.mode,
        "agent": agent.agent,
        "host": spec.host if spec.mode != "cli" else None,
        "cli_args": _embedded_only(not embedded, list(spec.cli_args)),
        "workers": _embedded_only(not embedded, spec.workers),
        "processes": peaks.processes,
        "tool": "read_file" if spec.mode == "cli" else "bench_tool",
        "transport": spec.transport,
        "telemetry": "off" if spec.telemetry_environ is None else "on",
        "event_loop": started.event_loop,
        "gc": spec.gc_mode if embedded else "daemon",
        "malloc_tuned": agent.malloc_tuned,
        "gc_threshold_in_effect": _embedded_only(embedded, list(gc.get_threshold())),
        "provider": spec.provider,
        "python": sys.executable,
        "sessions": spec.sessions,
        "rate_per_session": spec.rate,
        "window_s": round(seconds, 3),
        "events": window.events,
        "events_per_s": round(window.events / seconds, 1),
        "offered_events_per_s": spec.sessions * spec.rate,
        "frames_per_s": round(meter.frames_window / seconds, 1),
        "turns_per_s": round(meter.turns_window / seconds, 2),
        "preparing_frames": meter.preparing_window,
        "preparing_latency_ms": h.summarize_ms(latencies),
        "preparing_latency_sample_ms": [round(v / 1e6, 3) for v in h.reservoir(latencies, 4000)],
        "threads": {
            "before_runtime": _embedded_only(embedded, idle.threads_before),
            "agent_started": idle.threads_started,
            "idle_with_sessions": idle.threads_idle,
            "peak": peaks.threads,
            "harness": window.harness_threads if embedded else 0,
            "names_at_peak": peaks.names_at_peak,
        },
        "rss_kib": {
            "process_start": _embedded_only(embedded, idle.rss_start),
            "before_sessions": idle.rss_before,
            "after_sessions": idle.rss_after,
            "per_idle_session": round((idle.rss_after - idle.rss_before) / spec.sessions, 2),
            "peak_under_load": peaks.rss,
        },
        "cpu": _cpu_figures(spec, agent, window),
        "stream_loop_lag_ms": h.summarize_ms(started.lag.lags_ns) if started.lag else None,
        "what_if": {
            "http_pools": spec.pools,
            "keepalive": spec.keepalive,
            "gc_threshold": spec.gc_threshold,
            "gc_freeze": spec.gc_freeze,
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
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks._load_child SPEC OUT``: run SPEC (JSON), write the report to OUT."""
    spec_path, out_path = argv if argv is not None else sys.argv[1:]
    spec = ChildSpec.from_json(Path(spec_path).read_text(encoding="utf-8"))
    h.write_report(Path(out_path), run_child(spec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
