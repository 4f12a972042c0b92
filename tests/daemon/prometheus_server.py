"""A real Prometheus server (the distribution's ``prometheus``) scraping on loopback.

Started with a configuration, a data directory and a port of its own under the test's
temporary directory, and stopped (SIGTERM, then killed) when the test is done. Waits poll
its HTTP API with a generous deadline; nothing sleeps a fixed time.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tests.support.eventually import eventually

__all__ = ["PROMETHEUS", "PrometheusServer", "ScrapeTarget", "prometheus_server"]

PROMETHEUS = shutil.which("prometheus")
"""The server's executable (.ci/run installs the ``prometheus`` package)."""


@dataclass(frozen=True)
class ScrapeTarget:
    """One job: ``address`` (``host:port``) scraped at ``/metrics``, with ``token`` as the
    bearer credentials (read from a file, as an operator would keep it) if given."""

    job: str
    address: str
    token: str | None = None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _config(targets: Sequence[ScrapeTarget], folder: Path) -> str:
    lines = [
        "global:",
        "  scrape_interval: 1s",
        "  scrape_timeout: 1s",
        "scrape_configs:",
    ]
    for target in targets:
        lines += [f"  - job_name: {target.job}", "    metrics_path: /metrics"]
        if target.token is not None:
            token_file = folder / f"{target.job}.token"
            token_file.write_text(target.token + "\n")
            token_file.chmod(0o600)
            lines += [
                "    authorization:",
                "      type: Bearer",
                f"      credentials_file: {token_file}",
            ]
        lines += ["    static_configs:", f"      - targets: ['{target.address}']"]
    return "\n".join(lines) + "\n"


class PrometheusServer:
    def __init__(self, folder: Path, targets: Sequence[ScrapeTarget]) -> None:
        assert PROMETHEUS is not None, "prometheus is not installed (.ci/run installs it)"
        folder.mkdir(parents=True, exist_ok=True)
        config = folder / "prometheus.yml"
        config.write_text(_config(targets, folder))
        self.url = f"http://127.0.0.1:{_free_port()}"
        self._log_path = folder / "prometheus.log"
        self._log: IO[bytes] = self._log_path.open("wb")
        self.process = subprocess.Popen(
            [
                PROMETHEUS,
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

    def wait_ready(self, timeout: float = 60.0) -> None:
        def ready() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited {self.process.returncode}: {self.log()}")
            assert self._get("/-/ready")[0] == 200, f"prometheus is not ready: {self.log()}"
            return True

        eventually(ready, timeout=timeout)

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The instant vector ``promql`` evaluates to now."""
        status, body = self._get("/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        assert status == 200, (status, body)
        answer = json.loads(body)
        assert answer["status"] == "success", answer
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def wait_value(self, promql: str, expected: float, timeout: float = 60.0) -> None:
        """Poll until ``promql`` is one sample worth ``expected``."""

        def holds() -> bool:
            seen = self.query(promql)
            assert len(seen) == 1 and float(seen[0]["value"][1]) == expected, (
                f"{promql} = {seen}, not {expected}; targets: "
                + self._get("/api/v1/targets")[1].decode(errors="replace")
            )
            return True

        eventually(holds, timeout=timeout)

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
def prometheus_server(folder: Path, targets: Sequence[ScrapeTarget]) -> Iterator[PrometheusServer]:
    server = PrometheusServer(folder, targets)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
