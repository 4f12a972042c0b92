"""A real Prometheus server (the distribution's ``prometheus``) scraping a daemon on loopback.

So a benchmark can show the metrics as an operator's Prometheus sees them: scraped every
second through ``/metrics`` with the daemon's bearer token, then read back with the HTTP
API's ``query_range``. Its configuration, data and log live in a folder the caller owns.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from benchmarks.support.loopback import LOOPBACK

__all__ = ["READY_TIMEOUT_S", "PrometheusServer", "Series", "prometheus_server"]

READY_TIMEOUT_S = 60.0
SCRAPE_INTERVAL_S = 1


@dataclass(frozen=True)
class Series:
    """One series of a range query: its labels, and (unix time, value) points."""

    labels: dict[str, str]
    points: list[tuple[float, float]]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        port: int = probe.getsockname()[1]
        return port


def _config(job: str, address: str, token_file: Path) -> str:
    return "\n".join(
        [
            "global:",
            f"  scrape_interval: {SCRAPE_INTERVAL_S}s",
            f"  scrape_timeout: {SCRAPE_INTERVAL_S}s",
            "scrape_configs:",
            f"  - job_name: {job}",
            "    metrics_path: /metrics",
            "    authorization:",
            "      type: Bearer",
            f"      credentials_file: {token_file}",
            "    static_configs:",
            f"      - targets: ['{address}']",
            "",
        ]
    )


class PrometheusServer:
    """``prometheus`` scraping ``address`` (``host:port``) as ``job`` with ``token``."""

    def __init__(self, folder: Path, job: str, address: str, token: str) -> None:
        executable = shutil.which("prometheus")
        if executable is None:
            raise RuntimeError("prometheus is not installed (Debian: apt-get install prometheus)")
        folder.mkdir(parents=True, exist_ok=True)
        token_file = folder / f"{job}.token"
        token_file.write_text(token + "\n")
        token_file.chmod(0o600)
        config = folder / "prometheus.yml"
        config.write_text(_config(job, address, token_file))
        self.url = f"http://{LOOPBACK}:{_free_port()}"
        self._log_path = folder / "prometheus.log"
        self._log: IO[bytes] = self._log_path.open("wb")
        self.process = subprocess.Popen(
            [
                executable,
                f"--config.file={config}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address={self.url.removeprefix('http://')}",
                "--log.level=warn",
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
        )

    def log(self) -> str:
        self._log.flush()
        return self._log_path.read_text(errors="replace")

    def _get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, exc.read()
        except OSError:
            return 0, b""

    def _api(self, path: str, params: dict[str, str]) -> Any:
        status, body = self._get(f"/api/v1/{path}?" + urllib.parse.urlencode(params))
        if status != 200:
            raise RuntimeError(f"prometheus answered {status} to {path}: {body!r}")
        answer = json.loads(body)
        if answer.get("status") != "success":
            raise RuntimeError(f"prometheus failed {path}: {answer}")
        return answer["data"]

    def wait_until(self, promql: str, timeout: float = READY_TIMEOUT_S) -> None:
        """Poll until ``promql`` evaluates to at least one sample (Prometheus ready and the
        target scraped)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited {self.process.returncode}: {self.log()}")
            if self._get("/-/ready")[0] == 200 and self._api("query", {"query": promql})["result"]:
                return
            time.sleep(0.2)
        raise RuntimeError(f"{promql} had no sample within {timeout} s: {self.log()}")

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[Series]:
        """``promql`` evaluated every ``step`` s from ``start`` to ``end`` (unix times)."""
        data = self._api(
            "query_range",
            {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step}"},
        )
        return [
            Series(
                dict(item["metric"]),
                [(float(at), float(value)) for at, value in item["values"]],
            )
            for item in data["result"]
        ]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        with contextlib.suppress(OSError):
            self._log.close()


@contextlib.contextmanager
def prometheus_server(
    folder: Path, job: str, address: str, token: str
) -> Iterator[PrometheusServer]:
    """Start Prometheus, yield it once ``up{job=...}`` has a sample, always stop it."""
    server = PrometheusServer(folder, job, address, token)
    try:
        server.wait_until(f'up{{job="{job}"}} == 1')
        yield server
    finally:
        server.stop()
