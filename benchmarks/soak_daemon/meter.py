"""What the soak samples: the daemon's processes (``/proc``), its store's files, its gauges.

Read from outside, as an operator's monitoring would: no hook in the daemon, so the
numbers are those of the real program. The front is the ``toolprep serve`` process; its
workers are its children running ``toolprep.runtime.workers.worker`` (found anew at each
sample, since a killed worker is replaced by a process with another pid).
"""

from __future__ import annotations

import os
import re
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlsplit

from benchmarks import _harness as h

__all__ = [
    "GAUGES",
    "WORKER_MODULE",
    "Sample",
    "Sampler",
    "metrics_gauges",
    "worker_pids",
]

WORKER_MODULE = "toolprep.runtime.workers.worker"
"""What a worker's command line runs (``runtime/workers/process.py``)."""

GAUGES = {
    "toolprep_sessions_live": "sessions_live",
    "toolprep_clients_attached": "clients_attached",
    "toolprep_connections_open": "connections_open",
    "toolprep_send_buffer_bytes": "send_buffer_bytes",
    "toolprep_worker_restarts_total": "worker_restarts",
    "toolprep_compactions_total": "compactions",
}
"""The ``/metrics`` series the soak reads (summed over their labels), by the name it reports;
``compactions`` is read per worker slot (``compactions@N``), since a replaced worker's count
starts again from zero."""

METRICS_TIMEOUT_S = 10.0


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.decode(errors="replace").split("\0")


def _started(pid: int) -> int:
    """When ``pid`` started, in clock ticks since boot (``/proc/PID/stat`` field 22)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[19])


def worker_pids(front: int) -> list[int]:
    """The front's worker processes now (not its log keeper, not tool processes), oldest
    first."""
    found = [pid for pid in h.children(front) if WORKER_MODULE in _cmdline(pid)]
    return sorted(found, key=_started)


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0  # ended between listing and reading


def _status(read: str, pid: int) -> int:
    try:
        return h.rss_kib(pid) if read == "rss" else h.os_threads(pid)
    except (OSError, KeyError):
        return 0


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def metrics_gauges(url: str, token: str) -> dict[str, float]:
    """The ``GAUGES`` from the daemon's ``/metrics`` (ACP address, bearer token), each summed
    over its series; a gauge the page lacks is left out."""
    parts = urlsplit(url)
    request = urllib.request.Request(
        f"http://{parts.netloc}/metrics", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=METRICS_TIMEOUT_S) as answer:
        text = answer.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_part, _, value = line.rpartition(" ")
        name = name_part.split("{", 1)[0]
        key = GAUGES.get(name)
        if key is None:
            continue
        if name == "toolprep_compactions_total":
            if 'outcome="completed"' not in name_part:
                continue
            worker = _WORKER.search(name_part)
            key += f"@{worker.group(1) if worker else ''}"
        found[key] = found.get(key, 0.0) + float(value)
    return found


_WORKER = re.compile(r'worker="([^"]*)"')


@dataclass(frozen=True)
class Sample:
    """One reading, ``at`` seconds after the load started (sizes in KiB, RSS in MiB)."""

    at: float
    front_rss_mib: float
    workers_rss_mib: float
    oldest_worker_rss_mib: float
    """The worker that has run longest: the soak kills the youngest, so this one lives
    through the run and shows what the kills would hide in the workers' sum."""
    front_threads: int
    workers_threads: int
    front_fds: int
    workers_fds: int
    workers: int
    db_kib: float
    wal_kib: float
    sessions_live: float
    clients_attached: float
    connections_open: float
    send_buffer_kib: float
    worker_restarts: float
    compactions: float
    """Completed compactions since the load started (every worker's, replaced ones too)."""
    turns: int

    def row(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


class Sampler:
    """Reads a ``Sample`` of the daemon ``front`` (pid) with its data directory ``data``."""

    def __init__(self, front: int, data: Path, url: str, token: str, start: float) -> None:
        self.front = front
        self.db = data / "sessions.db"
        self.wal = data / "sessions.db-wal"
        self.url = url
        self.token = token
        self.start = start
        self.metrics_failures = 0
        self._last: dict[str, float] = {}
        self._compactions: dict[str, float] = {}
        self.compactions = 0.0
        """Completed compactions since the start, over every worker that ran."""

    def _count_compactions(self, gauges: dict[str, float]) -> None:
        for key, value in gauges.items():
            if key.startswith("compactions@"):
                before = self._compactions.get(key, 0.0)
                self.compactions += value - before if value >= before else value
                self._compactions[key] = value

    def gauges(self) -> dict[str, float]:
        """The daemon's gauges now; the last ones read when a scrape fails (counted)."""
        try:
            self._last = metrics_gauges(self.url, self.token)
            self._count_compactions(self._last)
        except (OSError, urllib.error.URLError, ValueError):
            self.metrics_failures += 1
        return self._last

    def sample(self, turns: int) -> Sample:
        workers = worker_pids(self.front)
        gauges = self.gauges()
        return Sample(
            at=time.monotonic() - self.start,
            front_rss_mib=_status("rss", self.front) / 1024,
            workers_rss_mib=sum(_status("rss", pid) for pid in workers) / 1024,
            oldest_worker_rss_mib=_status("rss", workers[0]) / 1024 if workers else 0.0,
            front_threads=_status("threads", self.front),
            workers_threads=sum(_status("threads", pid) for pid in workers),
            front_fds=_fds(self.front),
            workers_fds=sum(_fds(pid) for pid in workers),
            workers=len(workers),
            db_kib=_size(self.db) / 1024,
            wal_kib=_size(self.wal) / 1024,
            sessions_live=gauges.get("sessions_live", 0.0),
            clients_attached=gauges.get("clients_attached", 0.0),
            connections_open=gauges.get("connections_open", 0.0),
            send_buffer_kib=gauges.get("send_buffer_bytes", 0.0) / 1024,
            worker_restarts=gauges.get("worker_restarts", 0.0),
            compactions=self.compactions,
            turns=turns,
        )
