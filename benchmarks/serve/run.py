"""One serve run: sessions spread over connections, prompting for a measured window, and
its report."""

from __future__ import annotations

import argparse
import re
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.exceptions import ConnectionClosed

from benchmarks import _harness as h
from benchmarks.serve.daemon import Daemon, Side, serve_daemon
from benchmarks.serve.fresh_load import load_over_fresh_connection, summarize_loads
from benchmarks.serve.ws_client import Line, ResultHandler, WsLoadClient

__all__ = [
    "DRAIN_TIMEOUT_S",
    "OPEN_TIMEOUT_S",
    "RAMP_S",
    "RECONNECTS",
    "dir_files",
    "run_serve",
    "settled_rss",
]

RECONNECTS = 20
RAMP_S = 1.0
OPEN_TIMEOUT_S = 180.0
DRAIN_TIMEOUT_S = 120.0
_TROUBLE = re.compile(r"WARNING|ERROR|CRITICAL|Traceback")


@dataclass
class _Meter:
    """What one connection's reader thread records (each connection has its own)."""

    frames: int = 0
    frames_window: int = 0
    latencies_ns: list[int] = field(default_factory=list)
    turns: int = 0
    turns_window: int = 0
    prompt_errors: int = 0
    failed_tool_calls: int = 0
    stop_reasons: dict[str, int] = field(default_factory=dict)
    error_samples: list[Any] = field(default_factory=list)


class _Loop:
    """The prompt loop's shared state: in-flight turns, and whether the window is on."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight = 0
        self.running = threading.Event()
        self.running.set()
        self.recording = False


def _meter_frames(meter: _Meter, loop: _Loop) -> h.UpdateHandler:
    def on_update(_session_id: str, update: dict[str, Any], read_ns: int) -> None:
        meter.frames += 1
        if update.get("status") == "failed":
            meter.failed_tool_calls += 1  # a run whose tool calls fail measures the wrong path
        if not loop.recording:
            return
        meter.frames_window += 1
        stamp = h.preparing_stamp_ns(update)
        if stamp is not None:
            meter.latencies_ns.append(read_ns - stamp)

    return on_update


def _prompt(client: WsLoadClient, meter: _Meter, loop: _Loop, session_id: str) -> None:
    """One turn of ``session_id``; when it is answered the next one starts, until stopped."""
    with loop.lock:
        loop.in_flight += 1

    def done(response: Line, _read_ns: int) -> None:
        with loop.lock:
            loop.in_flight -= 1
        meter.turns += 1
        if loop.recording:
            meter.turns_window += 1
        result = response.get("result")
        if not isinstance(result, dict):
            meter.prompt_errors += 1
            if len(meter.error_samples) < 3:
                meter.error_samples.append(response.get("error"))
            return  # a failing session is not retried in a tight loop
        reason = str(result.get("stopReason"))
        meter.stop_reasons[reason] = meter.stop_reasons.get(reason, 0) + 1
        if loop.running.is_set():
            _prompt(client, meter, loop, session_id)

    try:
        client.request(
            "session/prompt",
            {"sessionId": session_id, "prompt": [{"type": "text", "text": "go"}]},
            done,
        )
    except ConnectionClosed:
        with loop.lock:
            loop.in_flight -= 1
        meter.prompt_errors += 1


class _DaemonPeaks:
    """The highest thread count, process count and RSS over the daemon's process tree."""

    def __init__(self, daemon: Daemon, threads: int, rss: int) -> None:
        self.daemon = daemon
        self.threads = threads
        self.processes = len(daemon.processes())
        self.rss = rss

    def sample(self) -> None:
        self.processes = max(self.processes, len(self.daemon.processes()))
        self.threads = max(self.threads, self.daemon.threads())
        self.rss = max(self.rss, self.daemon.rss_kib())

    def sample_until(self, deadline: float) -> None:
        h.sample_until(self.sample, deadline)


@dataclass(frozen=True)
class _Reading:
    """Counters at one edge of the measured window."""

    at: float
    events: int
    daemon_cpu: float
    own_cpu: float
    provider_cpu: float
    rss_by_process: dict[str, int]

    @classmethod
    def take(cls, daemon: Daemon, server: h.LoopbackServer) -> _Reading:
        return cls(
            time.monotonic(),
            server.stats()["events_sent"],
            daemon.cpu_seconds(),
            h.process_cpu_seconds(),
            h.process_cpu_seconds(server.process.pid),
            daemon.rss_split_kib(),
        )


@dataclass
class _Idle:
    """The daemon before load."""

    threads_started: int
    threads_connected: int = 0
    rss_before: int = 0
    rss_after: int = 0
    threads_idle: int = 0


def _connect(
    stack: ExitStack, daemon: Daemon, meters: list[_Meter], loop: _Loop
) -> list[WsLoadClient]:
    """One initialized client per meter, closed (before the daemon stops) with ``stack``."""
    clients: list[WsLoadClient] = []

    def close_clients() -> None:
        for client in clients:
            client.close()

    stack.callback(close_clients)
    for i, meter in enumerate(meters):
        frames = _meter_frames(meter, loop)
        clients.append(WsLoadClient(daemon.url, daemon.token, frames, f"bench-ws-{i}"))
    for client in clients:
        client.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    return clients


def _open_sessions(
    clients: list[WsLoadClient], sessions: int, workdir: str, label: str
) -> list[tuple[int, str]]:
    """``sessions`` sessions spread round-robin over the clients: (client index, id)."""
    opened: list[tuple[int, str]] = []
    opened_lock = threading.Lock()
    all_open = threading.Event()

    def got_session(index: int) -> ResultHandler:
        def got(response: Line, _read_ns: int) -> None:
            with opened_lock:
                opened.append((index, response["result"]["sessionId"]))
                if len(opened) == sessions:
                    all_open.set()

        return got

    for i in range(sessions):
        index = i % len(clients)
        clients[index].request(
            "session/new", {"cwd": workdir, "mcpServers": []}, got_session(index)
        )
    if not all_open.wait(OPEN_TIMEOUT_S):
        raise RuntimeError(f"{label}: only {len(opened)} of {sessions} sessions opened")
    return opened


def _ramp(
    opened: list[tuple[int, str]], clients: list[WsLoadClient], meters: list[_Meter], loop: _Loop
) -> None:
    start = time.monotonic()
    for (index, session_id), offset in zip(opened, h.stagger(len(opened), RAMP_S), strict=True):
        delay = start + offset - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        _prompt(clients[index], meters[index], loop, session_id)


def _drain(loop: _Loop, peaks: _DaemonPeaks) -> int:
    """Stop new prompts, wait (bounded) for the running ones; return those still running."""
    loop.running.clear()
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while time.monotonic() < deadline:
        with loop.lock:
            if loop.in_flight == 0:
                break
        peaks.sample()
        time.sleep(0.1)
    with loop.lock:
        return loop.in_flight


@dataclass
class _Served:
    """What one serve run saw, for the report."""

    first: _Reading
    last: _Reading
    foreign_cores: float
    idle: _Idle
    peaks: _DaemonPeaks
    unfinished: int
    drained_s: float
    reconnects: list[dict[str, Any]]
    clients: list[WsLoadClient]


def run_serve(
    label: str,
    server: h.LoopbackServer,
    args: argparse.Namespace,
    workdir: str,
    scratch: Path,
    data_dir: Path | None,
    side: Side | None = None,
) -> dict[str, Any]:
    """One daemon under ``args.sessions`` looping sessions; then the reconnect probe."""
    connections = min(args.connections, args.sessions)
    base_url = server.base_url + ("/v1" if args.provider == "openai" else "")
    loop = _Loop()
    meters = [_Meter() for _ in range(connections)]
    with ExitStack() as stack:
        daemon = stack.enter_context(
            serve_daemon(args.provider, base_url, args.workers, data_dir, scratch, side)
        )
        idle = _Idle(daemon.threads())
        clients = _connect(stack, daemon, meters, loop)
        idle.threads_connected = daemon.threads()
        # A throw-away session first, so lazy one-time set-up is not billed to sessions.
        clients[0].call("session/new", {"cwd": workdir, "mcpServers": []})
        idle.rss_before = settled_rss(daemon)
        opened = _open_sessions(clients, args.sessions, workdir, label)
        idle.rss_after = settled_rss(daemon)
        idle.threads_idle = daemon.threads()
        peaks = _DaemonPeaks(daemon, idle.threads_idle, idle.rss_after)
        _ramp(opened, clients, meters, loop)
        peaks.sample_until(time.monotonic() + args.warmup)

        first = _Reading.take(daemon, server)
        foreign = h.ForeignLoad(server.process.pid, *daemon.processes())
        loop.recording = True
        peaks.sample_until(first.at + args.duration)
        loop.recording = False
        last = _Reading.take(daemon, server)
        foreign_cores = foreign.cores()
        unfinished = _drain(loop, peaks)
        drained_s = time.monotonic() - last.at

        picks = [sid for _, sid in opened[:: max(1, len(opened) // RECONNECTS)]][:RECONNECTS]
        reconnects = [load_over_fresh_connection(daemon, sid, workdir) for sid in picks]
        served = _Served(
            first, last, foreign_cores, idle, peaks, unfinished, drained_s, reconnects, clients
        )
        report = _serve_report(label, args, connections, meters, served, data_dir)
        report["connections_closed_by_daemon"] = sum(1 for c in clients if not c.reader.is_alive())
    report["database"] = _database(data_dir, report["turns_total"])
    trouble = [line for line in daemon.stderr().splitlines() if _TROUBLE.search(line)]
    report["daemon_stderr_trouble_lines"] = len(trouble)
    report["daemon_stderr_trouble_sample"] = trouble[:10]
    return report


def _database(data_dir: Path | None, turns_total: int) -> dict[str, Any] | None:
    if data_dir is None:
        return None
    files = dir_files(data_dir)
    size = sum(files.values())
    return {
        "bytes": size,
        "files": files,
        "turns": turns_total,
        "kib_per_turn": round(size / 1024 / turns_total, 2) if turns_total else None,
    }


def _per_or_none(amount: float, count: float, scale: float, digits: int) -> float | None:
    return round(amount / count * scale, digits) if count else None


def _serve_cpu(served: _Served, events: int, turns_window: int) -> dict[str, Any]:
    first, last = served.first, served.last
    window = last.at - first.at
    daemon_cpu = last.daemon_cpu - first.daemon_cpu
    return {
        "daemon_s": round(daemon_cpu, 3),
        "runtime_s": round(daemon_cpu, 3),
        "runtime_cores": round(daemon_cpu / window, 3),
        "per_event_us": _per_or_none(daemon_cpu, events, 1e6, 2),
        "per_turn_us": _per_or_none(daemon_cpu, turns_window, 1e6, 1),
        "client_cores": round((last.own_cpu - first.own_cpu) / window, 3),
        "loopback_server_cores": round((last.provider_cpu - first.provider_cpu) / window, 3),
        "other_processes_cores": served.foreign_cores,
    }


def _serve_rss(served: _Served, sessions: int, frames_window: int) -> dict[str, Any]:
    idle = served.idle
    start_by_process, end_by_process = served.first.rss_by_process, served.last.rss_by_process
    rss_start, rss_end = sum(start_by_process.values()), sum(end_by_process.values())
    return {
        "before_sessions": idle.rss_before,
        "after_sessions": idle.rss_after,
        "per_idle_session": round((idle.rss_after - idle.rss_before) / sessions, 2),
        "window_start": rss_start,
        "window_end": rss_end,
        "window_start_by_process": start_by_process,
        "window_end_by_process": end_by_process,
        "window_growth_per_frame_bytes": _per_or_none(rss_end - rss_start, frames_window, 1024, 1),
        "peak_under_load": served.peaks.rss,
    }


def _serve_report(
    label: str,
    args: argparse.Namespace,
    connections: int,
    meters: list[_Meter],
    served: _Served,
    data_dir: Path | None,
) -> dict[str, Any]:
    window = served.last.at - served.first.at
    events = served.last.events - served.first.events
    turns_window = sum(m.turns_window for m in meters)
    frames_window = sum(m.frames_window for m in meters)
    turns_total = sum(m.turns for m in meters)
    latencies = [v for m in meters for v in m.latencies_ns]
    stop_reasons: dict[str, int] = {}
    for m in meters:
        for reason, count in m.stop_reasons.items():
            stop_reasons[reason] = stop_reasons.get(reason, 0) + count
    idle, clients = served.idle, served.clients
    return {
        "label": label,
        "agent": "serve",
        "persisted": data_dir is not None,
        "workers": args.workers,
        "provider": args.provider,
        "sessions": args.sessions,
        "connections": connections,
        "rate_per_session": args.rate,
        "window_s": round(window, 3),
        "events": events,
        "events_per_s": round(events / window, 1),
        "offered_events_per_s": args.sessions * args.rate,
        "frames_per_s": round(frames_window / window, 1),
        "turns_per_s": round(turns_window / window, 2),
        "turns_window": turns_window,
        "turns_total": turns_total,
        "preparing_frames": len(latencies),
        "preparing_latency_ms": h.summarize_ms(latencies),
        "preparing_latency_sample_ms": [round(v / 1e6, 3) for v in h.reservoir(latencies, 4000)],
        "processes": served.peaks.processes,
        "threads": {
            "daemon_started": idle.threads_started,
            "connected": idle.threads_connected,
            "idle_with_sessions": idle.threads_idle,
            "peak": served.peaks.threads,
        },
        "rss_kib": _serve_rss(served, args.sessions, frames_window),
        "cpu": _serve_cpu(served, events, turns_window),
        "reconnect": summarize_loads(served.reconnects, from_connect=True),
        "reconnect_samples": served.reconnects,
        "database": None,  # filled in once the daemon has stopped (its WAL checkpointed)
        "stop_reasons": stop_reasons,
        "prompt_errors": sum(m.prompt_errors for m in meters),
        "prompt_error_samples": [e for m in meters for e in m.error_samples][:5],
        "failed_tool_calls": sum(m.failed_tool_calls for m in meters),
        "unfinished_turns_at_exit": served.unfinished,
        "drain_s": round(served.drained_s, 2),
        "client_errors": sum(len(c.errors) for c in clients),
        "agent_requests": sum(c.agent_requests for c in clients),
    }


def settled_rss(daemon: Daemon) -> int:
    time.sleep(0.8)  # another process's garbage cannot be collected from here: let it idle
    return daemon.rss_kib()


def dir_files(path: Path) -> dict[str, int]:
    """Size of each file in ``path``: the database, and its WAL until it is checkpointed."""
    return {p.name: p.stat().st_size for p in sorted(path.iterdir()) if p.is_file()}
