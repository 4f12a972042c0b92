"""Shared pieces of the runtime benchmarks: the loopback provider, the editor side, meters.

The benchmarks measure the runtime the way an editor uses it: requests go in
as JSON-RPC lines on a pipe, frames come out as JSON-RPC lines on another
pipe, and a *drain thread* reads and parses every line, stamping the moment
it was read. That thread (and the client's writer thread) stand in for the
editor, which is another process in real use, so their CPU time is measured
separately and left out of the runtime's CPU figures.

Everything here talks only to loopback addresses and every wait is bounded.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import json
import os
import platform
import queue
import random
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parents[1]
REPORTS = REPO / "benchmarks" / "reports"


def _stand_in_testing_package() -> None:
    """Make ``toolprep.testing`` importable where the installed ``toolprep`` predates it.

    A benchmark child may run on another revision's interpreter (``--baseline-python``);
    there this checkout's ``testing/`` folder is loaded under that name, so both sides
    start a Ray cluster (``toolprep.testing.ray_cluster``) the same way.
    """
    if importlib.util.find_spec("toolprep.testing") is not None:
        return
    spec = importlib.util.spec_from_file_location(
        "toolprep.testing",
        REPO / "testing" / "__init__.py",
        submodule_search_locations=[str(REPO / "testing")],
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {REPO / 'testing'} as toolprep.testing")
    module = importlib.util.module_from_spec(spec)
    sys.modules["toolprep.testing"] = module
    spec.loader.exec_module(module)


_stand_in_testing_package()

from benchmarks.support.bench_tool import bench_registry as bench_registry  # noqa: E402
from benchmarks.support.loopback import BENCH_FILE as BENCH_FILE  # noqa: E402
from benchmarks.support.loopback import LOOPBACK as LOOPBACK  # noqa: E402
from benchmarks.support.loopback import LoopbackServer as LoopbackServer  # noqa: E402
from benchmarks.support.loopback import loopback_server as loopback_server  # noqa: E402
from benchmarks.support.loopback import port_reporting_process as port_reporting_process  # noqa: E402
from benchmarks.support.loopback import server_stats as server_stats  # noqa: E402
from benchmarks.support.loopback import write_bench_file as write_bench_file  # noqa: E402

# --- meters -----------------------------------------------------------------------------------


def _status_field(name: str, pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    raise KeyError(name)


def rss_kib(pid: int | str = "self") -> int:
    """Resident set size now, in KiB (``VmRSS``)."""
    return _status_field("VmRSS", pid)


def os_threads(pid: int | str = "self") -> int:
    """Threads of the process as the kernel counts them (Python's and any native ones)."""
    return _status_field("Threads", pid)


def process_cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU of this process (``pid=None``) or of another one."""
    if pid is None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def system_busy_seconds() -> float:
    """CPU time all processes on the machine have used (``/proc/stat``, every core, not idle)."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = stat.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


class ForeignLoad:
    """CPU used by *other* processes over an interval: this machine is shared with other work.

    ``own`` names the pids whose CPU is ours (this process, the loopback
    server); what the whole machine used beyond that, in cores, says how much
    of the 2 cores a run really had.
    """

    def __init__(self, *pids: int) -> None:
        self.pids = pids
        self._start = self._snapshot()

    def _snapshot(self) -> tuple[float, float, float]:
        own = process_cpu_seconds() + sum(_safe_cpu(pid) for pid in self.pids)
        return time.monotonic(), system_busy_seconds(), own

    def cores(self) -> float:
        t0, busy0, own0 = self._start
        t1, busy1, own1 = self._snapshot()
        if t1 <= t0:
            return 0.0
        return round(max(0.0, (busy1 - busy0) - (own1 - own0)) / (t1 - t0), 3)


def _safe_cpu(pid: int) -> float:
    try:
        return process_cpu_seconds(pid)
    except OSError:
        return 0.0


def wait_for_quiet(
    threshold_cores: float = 0.3, max_wait: float = 180.0, probe: float = 1.0
) -> float:
    """Wait (bounded) until other processes use under ``threshold_cores``; return the last reading.

    Figures measured while another job hogs one of the two cores are not
    the runtime's, so each run starts on a quiet machine when it can, and
    reports the foreign load it had either way.
    """
    deadline = time.monotonic() + max_wait
    while True:
        meter = ForeignLoad()
        time.sleep(probe)
        load = meter.cores()
        if load < threshold_cores or time.monotonic() >= deadline:
            return load


def thread_cpu_seconds(thread: threading.Thread) -> float:
    """CPU time one live thread has used; 0.0 once it is gone."""
    ident = thread.ident
    if ident is None or not thread.is_alive():
        return 0.0
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(ident))
    except (OSError, ProcessLookupError):
        return 0.0


def cpu_by_thread() -> dict[str, float]:
    """CPU seconds of every live thread, keyed by name with numeric suffixes folded.

    ``toolprep-tool_3`` and ``toolprep-tool_0`` add up under ``toolprep-tool``,
    so a breakdown stays readable whatever the pool sizes are.
    """
    out: dict[str, float] = {}
    for thread in threading.enumerate():
        key = _fold_name(thread.name)
        out[key] = out.get(key, 0.0) + thread_cpu_seconds(thread)
    return out


def _fold_name(name: str) -> str:
    base = name.rstrip("0123456789").rstrip("-_ ")
    if base.endswith(")"):  # "ThreadPoolExecutor-0_1 (worker)" style
        base = base.split("(")[0].rstrip()
    return base.rstrip("0123456789").rstrip("-_ ") or name


def cpu_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    keys = set(before) | set(after)
    return {k: round(after.get(k, 0.0) - before.get(k, 0.0), 4) for k in sorted(keys)}


def loop_kind(loop: asyncio.AbstractEventLoop) -> str:
    """``"asyncio"`` or ``"uvloop"``: the package a run's stream loop comes from."""
    return type(loop).__module__.partition(".")[0]


def percentile(sorted_values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile of already sorted values (``None`` when empty)."""
    if not sorted_values:
        return None
    rank = max(0, min(len(sorted_values) - 1, round(p / 100.0 * len(sorted_values) + 0.5) - 1))
    return sorted_values[rank]


def summarize_ms(values_ns: Iterable[int]) -> dict[str, Any]:
    """count / p50 / p90 / p99 / max in milliseconds for nanosecond samples."""
    ordered = sorted(values_ns)
    out: dict[str, Any] = {"count": len(ordered)}
    for label, p in (("p50", 50.0), ("p90", 90.0), ("p99", 99.0)):
        value = percentile(ordered, p)
        out[label] = None if value is None else round(value / 1e6, 3)
    out["max"] = round(ordered[-1] / 1e6, 3) if ordered else None
    return out


def settle_memory() -> int:
    """Collect garbage twice, give the allocator a moment, return RSS in KiB."""
    gc.collect()
    gc.collect()
    time.sleep(0.2)
    return rss_kib()


def machine_info() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
    }


def write_report(path: Path, report: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n", encoding="utf-8")


def reservoir(values: list[int], limit: int, seed: int = 1) -> list[int]:
    """At most ``limit`` samples, chosen evenly at random, for plots in the JSON report."""
    if len(values) <= limit:
        return list(values)
    return random.Random(seed).sample(values, limit)


# --- the editor side of one ACP connection --------------------------------------------------


Line = dict[str, Any]
UpdateHandler = Callable[[str, dict[str, Any], int], None]
"""``on_update(session_id, update, read_ns)``: called on the drain thread for each frame."""


class AcpClient:
    """The client end of an agent's stdio, in this process: one writer, one drain thread.

    ``read_ns`` handed to callbacks is ``time.time_ns()`` taken right after
    the read that returned the line, so it is comparable with the loopback
    provider's send stamps (another process on the same clock). Responses
    are matched to requests by id and their callbacks run on the drain
    thread, in wire order with the frames.

    A separate writer thread sends queued requests, so the client never
    blocks reading while the agent blocks writing (which would deadlock two
    full pipes); ``send_now`` writes from the calling thread for the few
    latency-critical small messages, which the pipe accepts atomically.
    """

    def __init__(self, to_agent: int, from_agent: int, on_update: UpdateHandler) -> None:
        self._to_agent = to_agent
        self._from_agent = from_agent
        self._on_update = on_update
        self._ids = iter(range(1, 1 << 62))
        self._pending: dict[int, Callable[[Line, int], None]] = {}
        self._pending_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self.input_closed = False
        self.lines_read = 0
        self.bytes_read = 0
        self.errors: list[Line] = []
        self.writer = threading.Thread(
            target=self._write_loop, name="bench-client-writer", daemon=True
        )
        self.drain = threading.Thread(target=self._drain_loop, name="bench-drain", daemon=True)
        self.writer.start()
        self.drain.start()

    # sending

    def _encode_request(
        self, method: str, params: Any, on_result: Callable[[Line, int], None] | None
    ) -> bytes:
        request_id = next(self._ids)
        if on_result is not None:
            with self._pending_lock:
                self._pending[request_id] = on_result
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        return orjson.dumps(message, option=orjson.OPT_APPEND_NEWLINE)

    def request(
        self, method: str, params: Any, on_result: Callable[[Line, int], None] | None = None
    ) -> None:
        """Queue a request; ``on_result(response, read_ns)`` runs on the drain thread."""
        self._outbox.put(self._encode_request(method, params, on_result))

    def notify(self, method: str, params: Any) -> None:
        self._outbox.put(
            orjson.dumps(
                {"jsonrpc": "2.0", "method": method, "params": params},
                option=orjson.OPT_APPEND_NEWLINE,
            )
        )

    def send_now(
        self,
        method: str,
        params: Any,
        on_result: Callable[[Line, int], None] | None = None,
        *,
        notification: bool = False,
    ) -> None:
        """Write one small message from this thread at once (no queue hop)."""
        if notification:
            data = orjson.dumps(
                {"jsonrpc": "2.0", "method": method, "params": params},
                option=orjson.OPT_APPEND_NEWLINE,
            )
        else:
            data = self._encode_request(method, params, on_result)
        self._write(data)

    def call(self, method: str, params: Any, timeout: float = 30.0) -> Line:
        """Blocking request for set-up steps (never call from the drain thread)."""
        return blocking_call(self.request, method, params, timeout)

    def _write(self, data: bytes) -> None:
        with self._write_lock:
            view = memoryview(data)
            while view:
                view = view[os.write(self._to_agent, view) :]

    def _write_loop(self) -> None:
        while True:
            data = self._outbox.get()
            if data is None:
                return
            try:
                self._write(data)
            except OSError:
                return

    def close_input(self) -> None:
        """End the agent's input (EOF), after everything queued was written; idempotent."""
        if self.input_closed:
            return
        self.input_closed = True
        self._outbox.put(None)
        self.writer.join(timeout=10)
        with suppress(OSError):
            os.close(self._to_agent)

    # reading

    def _drain_loop(self) -> None:
        buffer = b""
        read = os.read
        fd = self._from_agent
        loads = orjson.loads
        on_update = self._on_update
        while True:
            try:
                chunk = read(fd, 1 << 20)
            except OSError:
                return
            read_ns = time.time_ns()
            if not chunk:
                return
            self.bytes_read += len(chunk)
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for raw in lines:
                if not raw:
                    continue
                self.lines_read += 1
                message = loads(raw)
                method = message.get("method")
                if method == "session/update":
                    params = message["params"]
                    on_update(params["sessionId"], params["update"], read_ns)
                elif method is None:
                    with self._pending_lock:
                        callback = self._pending.pop(message.get("id"), None)
                    if "error" in message and callback is None:
                        self.errors.append(message)
                    if callback is not None:
                        callback(message, read_ns)

    def wait_drained(self, timeout: float = 10.0) -> None:
        self.drain.join(timeout)

    def harness_threads(self) -> list[threading.Thread]:
        return [self.writer, self.drain]


def blocking_call(
    request: Callable[[str, Any, Callable[[Line, int], None]], None],
    method: str,
    params: Any,
    timeout: float,
) -> Line:
    """Send with ``request(method, params, on_result)`` and wait for the success answer."""
    done = threading.Event()
    box: list[Line] = []

    def got(response: Line, _read_ns: int) -> None:
        box.append(response)
        done.set()

    request(method, params, got)
    if not done.wait(timeout):
        raise TimeoutError(f"no answer to {method} within {timeout} s")
    if "error" in box[0]:
        raise RuntimeError(f"{method} failed: {box[0]['error']}")
    return box[0]


@dataclass
class Pipes:
    """The two pipes of an agent's stdio: client -> agent, agent -> client."""

    agent_in: Any  # binary reader the agent's JsonRpcConnection reads
    agent_out: Any  # binary writer the agent's JsonRpcConnection writes
    client_w: int
    client_r: int
    extra: list[int] = field(default_factory=list)


def make_pipes() -> Pipes:
    c2a_r, c2a_w = os.pipe()
    a2c_r, a2c_w = os.pipe()
    return Pipes(os.fdopen(c2a_r, "rb"), os.fdopen(a2c_w, "wb"), c2a_w, a2c_r)


API_KEY_VARIABLES = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}


@dataclass
class CliAgent:
    """``toolprep acp`` in its own process, its stdio on two pipes this process holds the ends of.

    ``to_agent`` belongs to whoever writes the agent's input (an ``AcpClient``
    closes it to end the input); ``from_agent`` is closed when the agent is
    reaped.
    """

    process: subprocess.Popen[bytes]
    to_agent: int
    from_agent: int

    @property
    def pid(self) -> int:
        return self.process.pid

    def processes(self) -> list[int]:
        """The agent and every process under it (its workers, when it has any)."""
        return process_tree(self.pid)

    def cpu_seconds(self) -> float:
        return sum(_safe_cpu(pid) for pid in self.processes())

    def threads(self) -> int:
        return sum(_safe_status(os_threads, pid) for pid in self.processes())

    def rss_kib(self) -> int:
        return sum(_safe_status(rss_kib, pid) for pid in self.processes())


def children(pid: int) -> list[int]:
    """``pid``'s children, as ``/proc`` lists them now (none if it is gone)."""
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return found
    for task in tasks:
        try:
            found.extend(int(c) for c in (task / "children").read_text().split())
        except FileNotFoundError:
            continue
    return found


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants, as ``/proc`` lists them now (gone ones are skipped)."""
    found = [pid]
    for parent in found:  # grows while walked: breadth first
        found.extend(children(parent))
    return found


def _safe_status(read: Callable[[int], int], pid: int) -> int:
    try:
        return read(pid)
    except (OSError, KeyError):
        return 0  # ended between listing and reading


def cli_agent_command(
    provider: str, base_url: str, extra_args: Sequence[str] = (), python: str = sys.executable
) -> list[str]:
    """The command an editor would run, pointed at a loopback provider (no retries)."""
    return [
        python,
        "-m",
        "toolprep.runtime.cli",
        "acp",
        "--provider",
        provider,
        "--base-url",
        base_url,
        "--model",
        "bench",
        "--max-retries",
        "0",
        "--no-persist",  # the store's own cost is measured by benchmarks/store.py
        *extra_args,
    ]


@contextmanager
def cli_agent(
    provider: str, base_url: str, extra_args: Sequence[str] = (), exit_timeout: float = 15.0
) -> Iterator[CliAgent]:
    """Start ``toolprep acp`` with a dummy API key; on exit wait for it to end, else kill it.

    The agent exits by itself once its input ends, so the caller closes
    ``to_agent`` first; a run that failed before that gets the process
    terminated instead.
    """
    if provider not in API_KEY_VARIABLES:
        raise ValueError(f"no API key variable known for provider {provider!r}")
    c2a_r, c2a_w = os.pipe()
    a2c_r, a2c_w = os.pipe()
    env = {**os.environ, API_KEY_VARIABLES[provider]: "bench"}
    try:
        process = subprocess.Popen(
            cli_agent_command(provider, base_url, extra_args),
            stdin=c2a_r,
            stdout=a2c_w,
            cwd=tempfile.gettempdir(),  # not the checkout: its toolprep/ shadows another install
            env=env,
        )
    except BaseException:
        for fd in (c2a_r, c2a_w, a2c_r, a2c_w):
            os.close(fd)
        raise
    os.close(c2a_r)
    os.close(a2c_w)
    try:
        yield CliAgent(process, c2a_w, a2c_r)
    except BaseException:
        process.terminate()
        raise
    finally:
        try:
            process.wait(timeout=exit_timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        os.close(a2c_r)


def preparing_stamp_ns(update: dict[str, Any]) -> int | None:
    """Server send stamp of a *preparing* card (``None`` for every other frame).

    The loopback provider ends tool-call ids with ``_<time.time_ns()>``; the
    tracker may rename a reused id by appending ``_<n>``, which a stamp (19
    digits) is never confused with.
    """
    if update.get("sessionUpdate") != "tool_call":
        return None
    meta = update.get("_meta")
    if not meta or meta.get("phase") != "preparing" or meta.get("preparationDiscarded"):
        return None
    tail = update["toolCallId"].rsplit("_", 1)[-1]
    return int(tail) if len(tail) >= 18 and tail.isdigit() else None


def is_discard(update: dict[str, Any]) -> bool:
    meta = update.get("_meta")
    return bool(meta and meta.get("preparationDiscarded"))


class GcPauses:
    """Collector pauses by generation, via ``gc.callbacks`` (all threads stop while it runs)."""

    def __init__(self) -> None:
        self._started: int | None = None
        self.pauses_ns: dict[int, list[int]] = {0: [], 1: [], 2: []}
        self.recording = False

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter_ns()
        elif self._started is not None:
            if self.recording:
                self.pauses_ns[info.get("generation", 2)].append(
                    time.perf_counter_ns() - self._started
                )
            self._started = None

    def install(self) -> GcPauses:
        gc.callbacks.append(self)
        return self

    def remove(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)

    def summary(self, window_s: float) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for generation, values in self.pauses_ns.items():
            ordered = sorted(values)
            out[f"gen{generation}"] = {
                "count": len(ordered),
                "total_ms": round(sum(ordered) / 1e6, 2),
                "max_ms": round(ordered[-1] / 1e6, 2) if ordered else None,
            }
        out["share_of_window"] = (
            round(sum(sum(v) for v in self.pauses_ns.values()) / 1e9 / window_s, 4)
            if window_s
            else None
        )
        return out


class LoopLagProbe:
    """How late an asyncio loop runs a callback scheduled every ``interval`` seconds.

    A stream loop that is busy or blocked (a slow handler, a long request
    set-up, a collector pause, the GIL held elsewhere) delays every stream's
    next chunk by the same amount, so this lag is a floor under the
    preparing-card latency.
    """

    def __init__(self, loop: Any, interval: float = 0.02) -> None:
        self.loop = loop
        self.interval = interval
        self.lags_ns: list[int] = []
        self.recording = False
        self._stopped = False
        self._due = 0

    def start(self) -> LoopLagProbe:
        self.loop.call_soon_threadsafe(self._arm)
        return self

    def _arm(self) -> None:
        if self._stopped:
            return
        self._due = time.perf_counter_ns() + int(self.interval * 1e9)
        self.loop.call_later(self.interval, self._tick)

    def _tick(self) -> None:
        if self.recording:
            self.lags_ns.append(max(0, time.perf_counter_ns() - self._due))
        self._arm()

    def stop(self) -> None:
        self._stopped = True


def stop_daemon(process: subprocess.Popen[Any], timeout: float) -> None:
    """SIGTERM a daemon still running and wait ``timeout`` s for its graceful stop; kill it
    if that runs out."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def sample_until(sample: Callable[[], None], deadline: float, every: float = 0.1) -> None:
    """Call ``sample`` every ``every`` s until the monotonic clock reaches ``deadline``."""
    while time.monotonic() < deadline:
        sample()
        time.sleep(min(every, max(0.0, deadline - time.monotonic())))


def stagger(count: int, spread: float, seed: int = 3) -> list[float]:
    """Start offsets in ``[0, spread)`` so sessions do not move in lockstep."""
    rng = random.Random(seed)
    return sorted(rng.random() * spread for _ in range(count))


# --- another revision side by side ----------------------------------------------------------


def run_benchmark_module(
    python: str, module: str, args: Sequence[str], timeout: float
) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m benchmarks.<module> ARGS`` on ``python``, which may be another
    revision's interpreter (``--baseline-python``).

    It runs in a directory that holds only a link to this checkout's ``benchmarks/``: the
    benchmark's own files come from here, ``toolprep`` from that interpreter's install (the
    checkout's root on ``sys.path`` would put this checkout's ``toolprep/`` in front of it).
    """
    with tempfile.TemporaryDirectory(prefix="toolprep-bench-") as shim:
        (Path(shim) / "benchmarks").symlink_to(REPO / "benchmarks", target_is_directory=True)
        return subprocess.run(
            [python, "-m", f"benchmarks.{module}", *args],
            cwd=shim,
            check=True,
            timeout=timeout,
        )


def installed_toolprep(python: str) -> dict[str, str]:
    """Where ``python``'s ``toolprep`` comes from and its version, asked from a neutral
    directory; raises with the interpreter's own message when it has none."""
    probe = (
        "import json, toolprep, toolprep.runtime; "
        "print(json.dumps({'version': toolprep.__version__, "
        "'runtime': toolprep.runtime.__file__}))"
    )
    done = subprocess.run(
        [python, "-c", probe],
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{python} cannot import toolprep: {done.stderr.strip()[-400:]}")
    found: dict[str, str] = json.loads(done.stdout)
    return found
