"""``toolprep serve`` under load: what serving ACP over WebSocket costs next to stdio.

The daemon serves the same agent ``toolprep acp`` runs on stdio, but each
connection adds a WebSocket handshake, framing, a sender thread and the
daemon's session pool (frames fanned out once-encoded, kept for replay), and
sessions outlive their connections. This measures what that costs, in the
same run and on the same machine as the stdio figures it is compared with:

1. ``stdio``: ``benchmarks.load``'s ``cli`` run (``toolprep acp --no-persist``
   over two pipes), the baseline;
2. ``serve``: the daemon with ``--no-persist``, ``--sessions`` sessions spread
   round-robin over ``--connections`` WebSocket clients (a reader thread each),
   every session looping prompts against the loopback provider for
   ``--duration`` s after ``--warmup`` s;
3. ``serve+db``: the same with ``--data-dir`` in a temporary directory, so every
   frame and turn is journaled to SQLite.

Per run: provider events/s delivered against offered (``/stats`` deltas),
frames/s, turns/s, preparing-card latency (the provider's send stamp in the
tool-call id -> the frame read off the socket), the daemon's CPU per provider
event and per turn (summed over its process tree from ``/proc``: the front and
its workers), its processes and threads, and RSS per idle session. After the
window (prompts stopped, running turns answered) ~20 sessions are loaded again
on fresh connections: connect -> first replayed frame and -> the load reply.
The persisted run also gives the SQLite cost per turn (its CPU per turn minus
the unpersisted run's) and the database size per turn.

4. ``load``: a ``--load-turns``-turn session is written with ``SessionStore`` and
   ``StoreJournal`` (as ``benchmarks.store`` does), a daemon is started on that
   data directory, and ``session/load`` is timed five times, each on a fresh
   connection (request sent -> reply read, every replayed frame read before
   it). The first load reads the store (cold); after it the session is live in
   the daemon, so the others measure the live path (warm).

The load generator (the clients) shares the machine with the daemon and the
loopback provider; its CPU is printed (``client``) beside the daemon's, and a
run where the provider got fewer than 95 % of the offered events out is
flagged as saturated rather than hidden.

    .venv/bin/python -m benchmarks.serve [--sessions 1000] [--connections 100] [--rate 20]
        [--duration 10] [--warmup 3] [--workers N] [--provider anthropic|openai]
        [--load-turns 500] [--report path]
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import secrets
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from benchmarks import _harness as h
from benchmarks._load_child import ChildSpec, run_child
from benchmarks.store import TARGET_LOAD_MS, record_turn, turn_frames, turn_history
from toolprep.testing.daemon import serve_command

DEFAULT_REPORT = h.REPORTS / "serve.json"

TARGET_CPU_RATIO = (0.8, 1.2)
"""Serve's CPU per provider event over stdio's, same run: within +-20 %."""
TARGET_SESSIONS = 1000
TARGET_CONNECTIONS = 100
SATURATED_SHARE = 0.95
"""Below this share of the offered events delivered, the machine could not keep up."""
RECONNECTS = 20
LOADS = 5
RAMP_S = 1.0
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0
CALL_TIMEOUT_S = 60.0
OPEN_TIMEOUT_S = 180.0
DRAIN_TIMEOUT_S = 120.0

_LISTENING = re.compile(r"serving ACP on (ws://\S+)")
_TROUBLE = re.compile(r"WARNING|ERROR|CRITICAL|Traceback")

Line = dict[str, Any]
ResultHandler = Callable[[Line, int], None]


# --- the daemon ------------------------------------------------------------------------------


@dataclass
class Daemon:
    """``toolprep serve`` in its own process; meters read ``/proc`` for it and its workers."""

    process: subprocess.Popen[bytes]
    url: str
    token: str
    stderr_path: Path

    def processes(self) -> list[int]:
        return h.process_tree(self.process.pid)

    def cpu_seconds(self) -> float:
        return sum(_cpu_or_zero(pid) for pid in self.processes())

    def threads(self) -> int:
        return sum(_status_or_zero(h.os_threads, pid) for pid in self.processes())

    def rss_kib(self) -> int:
        return sum(_status_or_zero(h.rss_kib, pid) for pid in self.processes())

    def rss_split_kib(self) -> dict[str, int]:
        """RSS of the front (the process that holds the connections) and of its workers."""
        front = _status_or_zero(h.rss_kib, self.process.pid)
        return {"front": front, "workers": self.rss_kib() - front}

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")


def _cpu_or_zero(pid: int) -> float:
    try:
        return h.process_cpu_seconds(pid)
    except OSError:
        return 0.0  # ended between listing and reading


def _status_or_zero(read: Callable[[int], int], pid: int) -> int:
    try:
        return read(pid)
    except (OSError, KeyError):
        return 0


def daemon_command(
    provider: str,
    base_url: str,
    workers: int | None,
    data_dir: Path | None,
    side: Side | None = None,
) -> list[str]:
    """``toolprep serve`` on a free loopback port, pointed at the loopback provider."""
    side = side or Side()
    command = serve_command(provider, base_url, "--model", "bench", python=side.python)
    if side.event_loop is not None:
        command += ["--event-loop", side.event_loop]
    if workers is not None:
        command += ["--workers", str(workers)]
    command += ["--data-dir", str(data_dir)] if data_dir is not None else ["--no-persist"]
    return command


@dataclass(frozen=True)
class Side:
    """Which daemon a ``serve`` run starts: its interpreter, and its ``--event-loop`` if given."""

    python: str = sys.executable
    event_loop: str | None = None


@contextmanager
def serve_daemon(
    provider: str,
    base_url: str,
    workers: int | None,
    data_dir: Path | None,
    scratch: Path,
    side: Side | None = None,
) -> Iterator[Daemon]:
    """Start the daemon, yield it once it listens, always stop it (SIGTERM, then kill).

    Its stderr goes to a file (polled for the listening line) so no pipe is
    ever left undrained, however much it logs.
    """
    stderr_path = scratch / f"serve-{uuid.uuid4().hex[:8]}.stderr"
    token = secrets.token_urlsafe(32)
    env = {
        **os.environ,
        h.API_KEY_VARIABLES[provider]: "bench",
        "TOOLPREP_TOKEN": token,
        "XDG_DATA_HOME": str(scratch / "data-home"),  # its daemon file, with --no-persist
    }
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            daemon_command(provider, base_url, workers, data_dir, side),
            cwd=h.REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        url: str | None = None
        while url is None:
            found = _LISTENING.search(stderr_path.read_text(encoding="utf-8", errors="replace"))
            if found:
                url = found.group(1)
            elif process.poll() is not None:
                raise RuntimeError(
                    f"toolprep serve exited {process.returncode}: {_tail(stderr_path)}"
                )
            elif time.monotonic() > deadline:
                raise RuntimeError(f"toolprep serve did not listen: {_tail(stderr_path)}")
            else:
                time.sleep(0.05)
        yield Daemon(process, url, token, stderr_path)
    finally:
        h.stop_daemon(process, STOP_TIMEOUT_S)


def _tail(path: Path, lines: int = 20) -> str:
    return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


# --- the client side of one WebSocket connection ---------------------------------------------


class WsLoadClient:
    """One ACP connection to the daemon, as a remote editor holds it: a reader thread each.

    Responses are matched to requests by id and their callbacks run on the
    reader thread, in wire order with the frames; ``on_update(session_id,
    update, read_ns)`` gets each ``session/update`` with ``read_ns``, the
    ``time.time_ns()`` right after the frame was read (comparable with the
    provider's send stamps). When the connection ends every unanswered
    request is answered with a local error, so nothing waits for a reply
    that cannot come.
    """

    def __init__(
        self, url: str, token: str, on_update: h.UpdateHandler, name: str = "bench-ws"
    ) -> None:
        self.socket: ClientConnection = connect(
            url,
            additional_headers={"Authorization": f"Bearer {token}"},
            compression=None,
            legacy=True,
            max_size=None,
            open_timeout=CALL_TIMEOUT_S,
        )
        self._on_update = on_update
        self._ids = itertools.count(1)
        self._pending: dict[int, ResultHandler] = {}
        self._lock = threading.Lock()
        self.errors: list[Line] = []
        self.agent_requests = 0
        self.close_code: int | None = None
        self.reader = threading.Thread(target=self._read_loop, name=name, daemon=True)
        self.reader.start()

    def request(self, method: str, params: Any, on_result: ResultHandler | None = None) -> None:
        """Send a request; ``on_result(response, read_ns)`` runs on the reader thread.

        Raises ``ConnectionClosed`` once the connection is gone, unless the
        reader has already answered the request with its local error.
        """
        request_id = next(self._ids)
        if on_result is not None:
            with self._lock:
                self._pending[request_id] = on_result
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        try:
            self.socket.send(orjson.dumps(message), text=True)
        except ConnectionClosed:
            with self._lock:
                unanswered = self._pending.pop(request_id, None)
            if unanswered is not None or on_result is None:
                raise

    def call(self, method: str, params: Any, timeout: float = CALL_TIMEOUT_S) -> Line:
        """Blocking request for set-up steps (never call it from the reader thread)."""
        return h.blocking_call(self.request, method, params, timeout)

    def _read_loop(self) -> None:
        loads = orjson.loads
        on_update = self._on_update
        recv = self.socket.recv
        try:
            while True:
                data = recv(decode=False)
                read_ns = time.time_ns()
                message = loads(data)
                method = message.get("method")
                if method == "session/update":
                    params = message["params"]
                    on_update(params["sessionId"], params["update"], read_ns)
                elif method is None:
                    with self._lock:
                        callback = self._pending.pop(message.get("id"), None)
                    if callback is not None:
                        callback(message, read_ns)
                    elif "error" in message:
                        self.errors.append(message)
                else:
                    self.agent_requests += 1  # none expected: read_file needs no permission
        except ConnectionClosed:
            pass
        finally:
            self.close_code = self.socket.close_code
            with self._lock:
                orphans = list(self._pending.values())
                self._pending.clear()
            gone: Line = {"error": {"code": None, "message": "connection closed"}}
            for callback in orphans:
                callback(gone, time.time_ns())

    def close(self) -> None:
        self.socket.close()
        self.reader.join(10)


# --- one serve run ---------------------------------------------------------------------------


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
        idle.rss_before = _settled_rss(daemon)
        opened = _open_sessions(clients, args.sessions, workdir, label)
        idle.rss_after = _settled_rss(daemon)
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
    files = _dir_files(data_dir)
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
        "reconnect": _summarize_loads(served.reconnects, from_connect=True),
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


def _settled_rss(daemon: Daemon) -> int:
    time.sleep(0.8)  # another process's garbage cannot be collected from here: let it idle
    return daemon.rss_kib()


def _dir_files(path: Path) -> dict[str, int]:
    """Size of each file in ``path``: the database, and its WAL until it is checkpointed."""
    return {p.name: p.stat().st_size for p in sorted(path.iterdir()) if p.is_file()}


# --- session/load over a fresh connection ----------------------------------------------------


def load_over_fresh_connection(daemon: Daemon, session_id: str, cwd: str) -> dict[str, Any]:
    """Connect, ``initialize``, ``session/load``; milliseconds from the connect and the request.

    ``first_frame`` is the first replayed ``session/update`` read; ``reply``
    the load's answer, which comes after every replayed frame. The reader
    thread's CPU over the load is this side's share of the time (the frames
    are parsed like an editor would), the daemon's CPU the other side's.
    """
    marks: dict[str, int] = {}
    frames = [0]
    replied = threading.Event()
    reply: list[Line] = []

    def on_update(sid: str, _update: dict[str, Any], _read_ns: int) -> None:
        if sid == session_id:
            frames[0] += 1
            marks.setdefault("first_frame", time.perf_counter_ns())

    def on_reply(response: Line, _read_ns: int) -> None:
        marks["reply"] = time.perf_counter_ns()
        reply.append(response)
        replied.set()

    started = time.perf_counter_ns()
    client = WsLoadClient(daemon.url, daemon.token, on_update, "bench-load")
    try:
        connected = time.perf_counter_ns()
        client.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        reader_cpu0 = h.thread_cpu_seconds(client.reader)
        daemon_cpu0 = daemon.cpu_seconds()
        requested = time.perf_counter_ns()
        client.request(
            "session/load", {"sessionId": session_id, "cwd": cwd, "mcpServers": []}, on_reply
        )
        if not replied.wait(CALL_TIMEOUT_S):
            raise TimeoutError(f"no answer to session/load of {session_id}")
        reader_cpu = h.thread_cpu_seconds(client.reader) - reader_cpu0
        daemon_cpu = daemon.cpu_seconds() - daemon_cpu0
    finally:
        client.close()
    if "error" in reply[0]:
        raise RuntimeError(f"session/load of {session_id} failed: {reply[0]['error']}")

    def ms(since: int, mark: str) -> float | None:
        return round((marks[mark] - since) / 1e6, 3) if mark in marks else None

    return {
        "frames": frames[0],
        "connect_ms": round((connected - started) / 1e6, 3),
        "first_frame_ms_from_connect": ms(started, "first_frame"),
        "reply_ms_from_connect": ms(started, "reply"),
        "first_frame_ms": ms(requested, "first_frame"),
        "reply_ms": ms(requested, "reply"),
        "client_reader_cpu_ms": round(reader_cpu * 1000, 2),
        "daemon_cpu_ms": round(daemon_cpu * 1000, 2),
    }


def _summarize_loads(samples: Sequence[dict[str, Any]], *, from_connect: bool) -> dict[str, Any]:
    suffix = "_from_connect" if from_connect else ""
    out: dict[str, Any] = {"count": len(samples)}
    for key in ("first_frame_ms", "reply_ms"):
        values = sorted(s[key.replace("_ms", "_ms" + suffix)] or 0.0 for s in samples)
        out[key] = {
            "p50": h.percentile(values, 50.0),
            "max": values[-1] if values else None,
        }
    out["frames"] = {
        "min": min((s["frames"] for s in samples), default=None),
        "max": max((s["frames"] for s in samples), default=None),
    }
    return out


def build_long_session(data_dir: Path, cwd: str, turns: int) -> tuple[str, int]:
    """A ``turns``-turn session in ``data_dir``'s store, written as the runtime writes it.

    Released at the end: a session still owned by a live process (this one)
    would be refused to the daemon.
    """
    from toolprep.messages.content import Content
    from toolprep.runtime.hosting.assembly import STORE_FILE
    from toolprep.runtime.store import SessionStore
    from toolprep.runtime.store.journal import StoreJournal

    session_id = f"sess_{uuid.uuid4().hex}"
    with SessionStore(data_dir / STORE_FILE) as store:
        journal = StoreJournal(store)
        store.sessions.create(session_id, cwd, "bench")
        history: list[Content] = []
        for n in range(turns):
            history.extend(turn_history(n))
            record_turn(journal, session_id, turn_frames(n), tuple(history))
        if not journal.close(timeout=120):
            raise RuntimeError("the journal did not finish writing the long session")
        store.claims.release(session_id)
    return session_id, turns * len(turn_frames(0))


def _store_load_ms(data_dir: Path, session_id: str, repeats: int = 3) -> float:
    """``Sessions.load`` alone, in this process: the floor under a cold ``session/load``."""
    from toolprep.runtime.hosting.assembly import STORE_FILE
    from toolprep.runtime.store import SessionStore

    times = []
    with SessionStore(data_dir / STORE_FILE) as store:
        for _ in range(repeats):
            t0 = time.perf_counter()
            store.sessions.load(session_id)
            times.append((time.perf_counter() - t0) * 1000)
    return round(min(times), 2)


def run_long_load(
    server: h.LoopbackServer, args: argparse.Namespace, workdir: str, scratch: Path
) -> dict[str, Any]:
    """``session/load`` of a ``--load-turns`` session: once from the store, then live."""
    data_dir = scratch / "long-session"
    data_dir.mkdir()
    t0 = time.perf_counter()
    session_id, expected = build_long_session(data_dir, workdir, args.load_turns)
    built_s = time.perf_counter() - t0
    store_ms = _store_load_ms(data_dir, session_id)
    base_url = server.base_url + ("/v1" if args.provider == "openai" else "")
    with serve_daemon(args.provider, base_url, args.workers, data_dir, scratch) as daemon:
        samples = [load_over_fresh_connection(daemon, session_id, workdir) for _ in range(LOADS)]
    short = [s for s in samples if s["frames"] != expected]
    cold, warm = samples[0], samples[1:]
    warm_reply = sorted(s["reply_ms"] for s in warm)
    return {
        "turns": args.load_turns,
        "frames_expected": expected,
        "loads_with_missing_frames": len(short),
        "build_s": round(built_s, 2),
        "database_files": _dir_files(data_dir),
        "store_load_ms": store_ms,
        "cold": cold,
        "warm": {
            "count": len(warm),
            "reply_ms_p50": h.percentile(warm_reply, 50.0),
            "reply_ms_max": warm_reply[-1] if warm_reply else None,
            "first_frame_ms_max": max((s["first_frame_ms"] or 0.0 for s in warm), default=None),
        },
        "samples": samples,
    }


# --- the stdio baseline ----------------------------------------------------------------------


def run_stdio(args: argparse.Namespace, workers: int) -> dict[str, Any]:
    """``benchmarks.load``'s ``cli`` run: ``toolprep acp --no-persist`` over two pipes."""
    with h.loopback_server(args.rate, tool="read_file") as server:
        spec = ChildSpec.against(
            server,
            args.provider,
            mode="cli",
            sessions=args.sessions,
            rate=args.rate,
            duration=args.duration,
            ramp=RAMP_S,
            warmup=args.warmup,
            workers=workers,
        )
        run = run_child(spec)
    run["label"] = "stdio"
    run["connections"] = None
    turns_window = run["turns_per_s"] * run["window_s"]
    cpu = run["cpu"]
    cpu["per_turn_us"] = round(cpu["runtime_s"] / turns_window * 1e6, 1) if turns_window else None
    cpu["client_cores"] = round(cpu["harness_s"] / run["window_s"], 3)
    cpu["loopback_server_cores"] = round(cpu["loopback_server_s"] / run["window_s"], 3)
    return run


# --- report ----------------------------------------------------------------------------------


def _fmt(value: Any, spec: str = "") -> str:
    return "-" if value is None else format(value, spec)


def _share(run: dict[str, Any]) -> float:
    offered = run["offered_events_per_s"] or 0
    return run["events_per_s"] / offered if offered else 0.0


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def print_table(runs: Sequence[dict[str, Any]]) -> None:
    header = (
        f"{'run':<14}{'N':>6}{'conns':>6}{'events/s':>10}{'offered':>9}{'share':>7}"
        f"{'frames/s':>10}{'turns/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'preps':>7}"
        f"{'procs':>6}{'thr':>6}{'KiB/s':>7}{'us/ev':>7}{'us/turn':>9}{'cores':>7}"
        f"{'client':>7}{'prov':>6}{'other':>7}"
    )
    print(header)
    print("-" * len(header))
    for r in runs:
        lat, cpu = r["preparing_latency_ms"], r["cpu"]
        print(
            f"{r['label']:<14}{r['sessions']:>6}{_fmt(r['connections']):>6}"
            f"{r['events_per_s']:>10.0f}{r['offered_events_per_s']:>9.0f}{_share(r):>7.1%}"
            f"{r['frames_per_s']:>10.0f}{r['turns_per_s']:>9.1f}"
            f"{_fmt(lat['p50'], '.2f'):>9}{_fmt(lat['p99'], '.2f'):>9}{_fmt(lat['max'], '.1f'):>9}"
            f"{lat['count']:>7}{r['processes']:>6}{r['threads']['peak']:>6}"
            f"{r['rss_kib']['per_idle_session']:>7.1f}{_fmt(cpu['per_event_us'], '.1f'):>7}"
            f"{_fmt(cpu['per_turn_us'], '.0f'):>9}{cpu['runtime_cores']:>7.2f}"
            f"{cpu['client_cores']:>7.2f}{cpu['loopback_server_cores']:>6.2f}"
            f"{cpu.get('other_processes_cores', 0.0):>7.2f}"
        )


def print_details(runs: Sequence[dict[str, Any]], long_load: dict[str, Any]) -> None:
    for r in runs:
        print(
            f"  {r['label']}: prompt errors {r['prompt_errors']}, failed tool cards "
            f"{r['failed_tool_calls']}, unfinished turns {r['unfinished_turns_at_exit']}, "
            f"stop reasons {r['stop_reasons']}"
            + (
                f", connections closed by the daemon {r['connections_closed_by_daemon']}, "
                f"daemon stderr warnings/errors {r['daemon_stderr_trouble_lines']}, "
                f"in-flight turns drained in {r['drain_s']} s"
                if r["agent"] == "serve"
                else ""
            )
        )
        if r.get("prompt_error_samples"):
            print(f"    first prompt errors: {r['prompt_error_samples'][:3]}")
        if r.get("daemon_stderr_trouble_sample"):
            for line in r["daemon_stderr_trouble_sample"][:5]:
                print(f"    daemon: {line[:200]}")
    for r in runs:
        if r["agent"] != "serve":
            continue
        rss, rc = r["rss_kib"], r["reconnect"]
        print(
            f"  {r['label']}: RSS {rss['after_sessions'] / 1024:.0f} MiB idle with sessions, "
            f"{rss['window_start'] / 1024:.0f} -> {rss['window_end'] / 1024:.0f} MiB over the "
            f"window ({_fmt(rss['window_growth_per_frame_bytes'])} B per frame sent; front "
            f"{rss['window_start_by_process']['front'] / 1024:.0f} -> "
            f"{rss['window_end_by_process']['front'] / 1024:.0f} MiB), "
            f"peak {rss['peak_under_load'] / 1024:.0f} MiB; threads {r['threads']}"
        )
        print(
            f"  {r['label']}: reconnect ({rc['count']} sessions, {rc['frames']['min']}-"
            f"{rc['frames']['max']} frames replayed): connect -> first frame p50 "
            f"{_fmt(rc['first_frame_ms']['p50'], '.1f')} / max "
            f"{_fmt(rc['first_frame_ms']['max'], '.1f')} ms, -> load reply p50 "
            f"{_fmt(rc['reply_ms']['p50'], '.1f')} / max {_fmt(rc['reply_ms']['max'], '.1f')} ms"
        )
    cold, warm = long_load["cold"], long_load["warm"]
    print(
        f"  load of a {long_load['turns']}-turn session ({long_load['frames_expected']} frames, "
        f"store {sum(long_load['database_files'].values()) / 1024:.0f} KiB, "
        f"Sessions.load alone {long_load['store_load_ms']:.1f} ms): cold (from the store) "
        f"{cold['reply_ms']:.1f} ms (first frame {_fmt(cold['first_frame_ms'], '.1f')} ms; "
        f"daemon CPU {cold['daemon_cpu_ms']:.0f} ms, client reader CPU "
        f"{cold['client_reader_cpu_ms']:.0f} ms), warm (live) p50 "
        f"{_fmt(warm['reply_ms_p50'], '.1f')} / max {_fmt(warm['reply_ms_max'], '.1f')} ms "
        f"over {warm['count']}; loads with frames missing: "
        f"{long_load['loads_with_missing_frames']}"
    )


def sqlite_cost(plain: dict[str, Any], persisted: dict[str, Any]) -> dict[str, Any]:
    """The persisted run's CPU per turn over the unpersisted one's: what journaling costs."""
    a, b = plain["cpu"]["per_turn_us"], persisted["cpu"]["per_turn_us"]
    database = persisted["database"] or {}
    return {
        "cpu_per_turn_us_unpersisted": a,
        "cpu_per_turn_us_persisted": b,
        "write_cost_per_turn_us": round(b - a, 1) if a is not None and b is not None else None,
        "cpu_per_event_us_unpersisted": plain["cpu"]["per_event_us"],
        "cpu_per_event_us_persisted": persisted["cpu"]["per_event_us"],
        "turns_per_s_unpersisted": plain["turns_per_s"],
        "turns_per_s_persisted": persisted["turns_per_s"],
        "database_kib_per_turn": database.get("kib_per_turn"),
        "database_bytes": database.get("bytes"),
        "database_turns": database.get("turns"),
        "database_files": database.get("files"),
    }


def evaluate(
    stdio: dict[str, Any],
    serve: dict[str, Any],
    persisted: dict[str, Any],
    long_load: dict[str, Any],
) -> dict[str, Any]:
    """PASS/MISS per target; the CPU target names 1000 sessions over 100 connections."""
    low, high = TARGET_CPU_RATIO
    ratio = _ratio(serve["cpu"]["per_event_us"], stdio["cpu"]["per_event_us"])
    ratio_db = _ratio(persisted["cpu"]["per_event_us"], stdio["cpu"]["per_event_us"])
    at_target = serve["sessions"] == TARGET_SESSIONS and serve["connections"] == TARGET_CONNECTIONS
    cold = long_load["cold"]["reply_ms"]
    warm = long_load["warm"]["reply_ms_max"]
    complete = long_load["loads_with_missing_frames"] == 0
    saturated = {
        r["label"]: round(_share(r), 3)
        for r in (stdio, serve, persisted)
        if _share(r) < SATURATED_SHARE
    }
    return {
        "cpu_per_event": {
            "target": f"serve CPU/event over stdio CPU/event within {low}-{high} "
            f"({TARGET_SESSIONS} sessions over {TARGET_CONNECTIONS} connections)",
            "ratio": ratio,
            "ratio_persisted": ratio_db,
            "measured_at": f"{serve['sessions']} sessions over {serve['connections']} connections",
            "at_target_scale": at_target,
            "verdict": _verdict(ratio is not None and low <= ratio <= high),
        },
        "long_session_load": {
            "target": f"session/load of a {long_load['turns']}-turn session < "
            f"{TARGET_LOAD_MS:.0f} ms",
            "cold_ms": cold,
            "warm_max_ms": warm,
            "ratio_cold": _ratio(cold, TARGET_LOAD_MS),
            "ratio_warm": _ratio(warm, TARGET_LOAD_MS),
            "verdict": _verdict(
                complete and cold < TARGET_LOAD_MS and warm is not None and warm < TARGET_LOAD_MS
            ),
        },
        "saturated_runs": saturated,
    }


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def print_verdicts(targets: dict[str, Any], cost: dict[str, Any]) -> None:
    print(
        f"SQLite write cost per turn: {_fmt(cost['write_cost_per_turn_us'], '.0f')} us "
        f"(CPU per turn {_fmt(cost['cpu_per_turn_us_persisted'], '.0f')} persisted at "
        f"{cost['turns_per_s_persisted']:.1f} turns/s - "
        f"{_fmt(cost['cpu_per_turn_us_unpersisted'], '.0f')} unpersisted at "
        f"{cost['turns_per_s_unpersisted']:.1f} turns/s; CPU per event "
        f"{_fmt(cost['cpu_per_event_us_persisted'], '.1f')} vs "
        f"{_fmt(cost['cpu_per_event_us_unpersisted'], '.1f')} us); database "
        f"{_fmt(cost['database_kib_per_turn'], '.2f')} KiB per turn "
        f"({_fmt(cost['database_turns'])} turns; files {cost['database_files']})"
    )
    cpu, lo = targets["cpu_per_event"], targets["long_session_load"]
    scale = "" if cpu["at_target_scale"] else f" [measured at {cpu['measured_at']}]"
    print(
        f"{cpu['verdict']}  {cpu['target']}: ratio {_fmt(cpu['ratio'], '.2f')} "
        f"(persisted: {_fmt(cpu['ratio_persisted'], '.2f')}){scale}"
    )
    print(
        f"{lo['verdict']}  {lo['target']}: cold {lo['cold_ms']:.1f} ms "
        f"({_fmt(lo['ratio_cold'], '.2f')} of the target), warm max "
        f"{_fmt(lo['warm_max_ms'], '.1f')} ms ({_fmt(lo['ratio_warm'], '.2f')})"
    )
    for label, share in targets["saturated_runs"].items():
        print(
            f"SATURATED  {label}: {share:.1%} of the offered events delivered "
            f"(< {SATURATED_SHARE:.0%}): the machine could not keep up; its figures are "
            f"those of a saturated run"
        )


# --- main ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--rate", type=float, default=20.0, help="provider events/s per session")
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before measuring")
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="--workers for toolprep acp / serve (default: the command's own default)",
    )
    parser.add_argument("--provider", choices=("anthropic", "openai"), default="anthropic")
    parser.add_argument("--load-turns", type=int, default=500, help="turns of the long session")
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=60.0,
        help="before each run wait up to this many seconds for other processes to go idle",
    )
    parser.add_argument("--report", type=Path, default=DEFAULT_REPORT)
    parser.add_argument(
        "--baseline-python",
        default=None,
        metavar="PATH",
        help="only the serve run, once per --event-loops value and once on this interpreter "
        "(another revision's, from benchmarks.revision), interleaved; no stdio, db or load runs",
    )
    parser.add_argument(
        "--event-loops",
        default="",
        help="with --baseline-python: the new daemon's --event-loop values, comma-separated",
    )
    args = parser.parse_args(argv)
    if args.sessions < 1 or args.connections < 1 or args.load_turns < 1:
        parser.error("--sessions, --connections and --load-turns must be positive")
    if args.workers is not None and args.workers < 1:
        parser.error("--workers must be positive")
    from toolprep.runtime.workers import default_worker_count

    workers = args.workers if args.workers is not None else default_worker_count()

    def quiet() -> None:
        if args.wait_quiet > 0:
            other = h.wait_for_quiet(max_wait=args.wait_quiet)
            if other >= 0.3:
                print(f"  (other processes still use {other:.2f} cores; measuring anyway)")

    if args.baseline_python:
        return compare_revisions(args, quiet)
    print(f"stdio N={args.sessions} workers={workers}: running ...", flush=True)
    quiet()
    stdio = run_stdio(args, workers)
    runs = [stdio]
    with ExitStack() as stack:
        scratch, workdir, server = _bench_setting(stack, args.rate)
        for label, data_dir in (("serve", None), ("serve+db", scratch / "data")):
            print(
                f"{label} N={args.sessions} over {args.connections} connections: running ...",
                flush=True,
            )
            quiet()
            runs.append(run_serve(label, server, args, str(workdir), scratch, data_dir))
        print(f"load of a {args.load_turns}-turn session: running ...", flush=True)
        long_load = run_long_load(server, args, str(workdir), scratch)
    serve, persisted = runs[1], runs[2]

    print()
    print(
        f"provider {args.provider}, rate {args.rate:g} events/s per session, "
        f"{args.duration:g} s measured after {args.warmup:g} s, workers {workers}"
        f"{'' if args.workers is not None else ' (the command default)'}, "
        f"{os.cpu_count()} cores shared by the daemon, the clients and the provider"
    )
    print_table(runs)
    print()
    print_details(runs, long_load)
    print()
    cost = sqlite_cost(serve, persisted)
    targets = evaluate(stdio, serve, persisted, long_load)
    print_verdicts(targets, cost)
    report = {
        "benchmark": "serve",
        "machine": h.machine_info(),
        "config": {
            "sessions": args.sessions,
            "connections": args.connections,
            "rate": args.rate,
            "duration": args.duration,
            "warmup": args.warmup,
            "ramp": RAMP_S,
            "workers": workers,
            "workers_flag_given": args.workers is not None,
            "provider": args.provider,
            "load_turns": args.load_turns,
        },
        "runs": runs,
        "sqlite_cost": cost,
        "long_session_load": long_load,
        "targets": targets,
    }
    h.write_report(args.report, report)
    print(f"\nreport: {args.report}")
    return 0


def _bench_setting(stack: ExitStack, rate: float) -> tuple[Path, Path, h.LoopbackServer]:
    """A scratch directory, the sessions' working directory in it, and the loopback provider."""
    scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="toolprep-serve-")))
    workdir = scratch / "work"
    workdir.mkdir()
    (workdir / h.BENCH_FILE).write_text(
        "".join(f"line {i}: alpha beta gamma delta\n" for i in range(1, 21)), encoding="utf-8"
    )
    return scratch, workdir, stack.enter_context(h.loopback_server(rate, tool="read_file"))


def compare_revisions(args: argparse.Namespace, quiet: Callable[[], None]) -> int:
    """The serve run on this revision (per event loop) and on ``--baseline-python``'s."""
    loops = [loop for loop in args.event_loops.split(",") if loop]
    sides = {f"serve:{loop}": Side(event_loop=loop) for loop in loops} or {"serve": Side()}
    sides["serve:base"] = Side(python=args.baseline_python)
    runs = []
    with ExitStack() as stack:
        scratch, workdir, server = _bench_setting(stack, args.rate)
        for label, side in sides.items():
            print(f"{label} N={args.sessions} over {args.connections} connections: running ...")
            quiet()
            runs.append(run_serve(label, server, args, str(workdir), scratch, None, side))
    print()
    print_table(runs)
    print()
    for r in runs:
        print(f"  {r['label']}: stop reasons {r['stop_reasons']}, errors {r['prompt_errors']}")
    h.write_report(args.report, {"benchmark": "serve-revisions", "runs": runs})
    print(f"\nreport: {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
