"""``toolprep serve`` as a real process on a free loopback port."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from tests.support.eventually import eventually
from tests.support.message_log import Message
from tests.support.processes import gone_within, pids_with_argument
from tests.support.ws_client import WsClient
from toolprep.runtime.daemon.discovery import DaemonFileError, read_daemon_file

_LISTENING = re.compile(
    r"serving ACP on (ws://\S+) \((?:address and token in (.+)|no daemon file: cannot write "
    r"(\S+): .+)\)$",
    re.MULTILINE,
)


def refused_start(
    cwd: Path, *options: str, timeout: float = 60.0, env_extra: Mapping[str, str] | None = None
) -> str:
    """Run ``toolprep serve --no-persist OPTIONS``, which must refuse to start (exit
    status 2); what it said on stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "toolprep.runtime.cli", "serve", "--no-persist", *options],
        capture_output=True,
        cwd=cwd,
        env=daemon_environment({"XDG_DATA_HOME": str(cwd / "data-home"), **(env_extra or {})}),
        timeout=timeout,
        text=True,
    )
    assert done.returncode == 2, done.stderr
    return done.stderr


def daemon_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment without real keys or a daemon token, with a test provider key."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.pop("TOOLPREP_TOKEN", None)
    env["ANTHROPIC_API_KEY"] = "test-key"
    env.update(extra or {})
    return env


class DaemonProcess:
    """A started daemon: ``url``, and the ``token`` and ``address_file`` it announced."""

    def __init__(
        self,
        command: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        stderr_file: Path,
        *,
        start_timeout: float = 60.0,
    ) -> None:
        self._stderr_path = stderr_file
        self._stderr: IO[bytes] = stderr_file.open("wb")
        self.process = subprocess.Popen(
            list(command),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
        )
        try:
            self.url, self.address_file, written = self._wait_listening(start_timeout)
            if written:
                # Read at once: a daemon started later on the same data directory replaces it.
                address = json.loads(self.address_file.read_text(encoding="utf-8"))
                self.token: str = address["token"]
            else:  # it could not write the file: it serves the token it was given
                self.token = env["TOOLPREP_TOKEN"]
        except BaseException:
            self.kill()
            raise

    def _wait_listening(self, timeout: float) -> tuple[str, Path, bool]:
        """The URL, the daemon file, and whether the daemon could write it."""

        def listening_or_exited() -> re.Match[str] | bool:
            return _LISTENING.search(self.stderr()) or self.process.poll() is not None

        try:
            found = eventually(listening_or_exited, timeout=timeout)
        except AssertionError as failure:
            raise AssertionError(
                f"the daemon did not listen within {timeout} s: {self.stderr()}"
            ) from failure
        if not isinstance(found, re.Match):
            raise AssertionError(f"the daemon exited {self.process.returncode}: {self.stderr()}")
        written = found.group(2) is not None
        return found.group(1), Path(found.group(2) or found.group(3)), written

    def client(self) -> WsClient:
        """A client that authenticates with the daemon's token."""
        return WsClient(self.url, self.token)

    def loaded(self, session_id: str, cwd: Path) -> WsClient:
        """A fresh client that has loaded ``session_id`` (the caller closes it)."""
        client = self.client()
        client.initialize()
        assert client.load(session_id, cwd)["result"].keys() == {"modes", "configOptions"}
        return client

    def replayed(self, session_id: str, cwd: Path) -> list[Message]:
        """What a fresh client is replayed on ``session/load`` (it attaches for a moment)."""
        client = self.loaded(session_id, cwd)
        try:
            return client.updates(session_id)
        finally:
            client.close()

    def stderr(self) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return self._stderr_path.read_text(errors="replace")

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, as a service manager stops it; the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout)
        self._stderr.close()
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        with contextlib.suppress(OSError):
            self._stderr.close()


def stop_started_daemons(data: Path) -> None:
    """SIGTERM the daemon named in ``data``'s daemon file, as a service manager would, and
    any other process still serving ``data`` (a second daemon, had two been started)."""
    pids = set(pids_with_argument(str(data)))
    with contextlib.suppress(DaemonFileError):
        pids.add(read_daemon_file(data).pid)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    stuck = [pid for pid in pids if not gone_within(pid, 60)]
    for pid in stuck:
        os.kill(pid, signal.SIGKILL)
    assert not stuck, f"ignored SIGTERM: {stuck}"
