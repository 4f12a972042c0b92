"""``toolprep serve`` on the replay provider, and plain HTTP GETs to it, for the telemetry tests."""

from __future__ import annotations

import re
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.support.daemon_process import DaemonProcess, daemon_environment
from tests.support.eventually import eventually
from tests.support.ws_client import WsClient

__all__ = [
    "NOTES_PROMPT",
    "README_PROMPT",
    "Answer",
    "get",
    "http_base",
    "metrics_url",
    "one_turn",
    "replay_daemon",
    "sample",
]

README_PROMPT = "Read README.md and tell me what this project is."
"""The prompt the replay provider has a whole recorded turn for."""
NOTES_PROMPT = "Write a short NOTES.md for this project."
"""The replay provider's second turn: its first attempt is refused as overloaded once."""

_METRICS_LINE = re.compile(r"serving metrics without a token on (http://\S+)$", re.MULTILINE)


def replay_daemon(
    tmp_path: Path,
    *options: str,
    env_extra: Mapping[str, str] | None = None,
    python_options: tuple[str, ...] = (),
    data_dir: Path | None = None,
) -> DaemonProcess:
    """A daemon on a free loopback port, its store in ``data_dir`` (default: under
    ``tmp_path``), on the replay provider."""
    command = [
        sys.executable,
        *python_options,
        "-m",
        "toolprep.runtime.cli",
        "serve",
        "--port",
        "0",
        "--provider",
        "replay",
        "--data-dir",
        str(data_dir or tmp_path / "data"),
        *options,
    ]
    env = daemon_environment({"XDG_DATA_HOME": str(tmp_path / "data-home"), **(env_extra or {})})
    return DaemonProcess(command, env, tmp_path, tmp_path / "daemon.log")


def one_turn(daemon: DaemonProcess, cwd: Path) -> str:
    """Open a session in ``cwd`` and run the recorded README turn to its end; its stop reason.

    The client stays connected; it is closed before returning."""
    cwd.mkdir(parents=True, exist_ok=True)
    (cwd / "README.md").write_text("# A project\n\nSomething to read.\n")
    client = WsClient(daemon.url, daemon.token)
    try:
        session_id = client.start_session(cwd)
        reason: str = client.result(client.prompt(session_id, README_PROMPT), timeout=120)[
            "stopReason"
        ]
        return reason
    finally:
        client.close()


def http_base(daemon: DaemonProcess) -> str:
    """``http://host:port`` of the daemon's ACP address."""
    return daemon.url.replace("ws://", "http://", 1).removesuffix("/acp")


def logged(daemon: DaemonProcess, line: re.Pattern[str], timeout: float = 60.0) -> re.Match[str]:
    """The first match of ``line`` in the daemon's log, once it has written one."""
    found = eventually(
        lambda: line.search(daemon.stderr()),
        timeout=timeout,
        what=f"the daemon logged {line.pattern!r}: ",
    )
    assert found is not None  # eventually returns only a true value
    return found


def metrics_url(daemon: DaemonProcess, timeout: float = 30.0) -> str:
    """The tokenless metrics URL the daemon announced (``--metrics-port``)."""
    return logged(daemon, _METRICS_LINE, timeout).group(1)


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: str


def get(url: str, headers: Mapping[str, str] | None = None) -> Answer:
    request = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return Answer(
                answer.status, answer.headers.get("Content-Type", ""), answer.read().decode()
            )
    except urllib.error.HTTPError as exc:
        with exc:
            return Answer(exc.code, exc.headers.get("Content-Type", ""), exc.read().decode())


def sample(exposition: str, name: str) -> float | None:
    """The value of the one sample of ``name`` (any labels) in a Prometheus text page."""
    found = re.findall(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? (\S+)$", exposition, re.MULTILINE)
    assert len(found) <= 1, (name, found)
    return float(found[0]) if found else None
