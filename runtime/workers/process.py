"""A worker process as its front sees it: how it is started, its pipes, how it ended.

Kept apart from the routing (``front``) so that what it takes to run a child
process correctly (the ready handshake, closing broken pipes, telling a
signal from an exit status) reads on its own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toolprep.runtime.kernel.session_host import SessionHostError
from toolprep.runtime.process.secrets import secret_variables, withdrawn_names
from toolprep.runtime.workers.front_death import front_env
from toolprep.runtime.workers.protocol import (
    PROTOCOL_VERSION,
    Command,
    Event,
    ProtocolError,
    Ready,
    decode_event,
    encode_command,
)
from toolprep.runtime.workers.wire import FrameReader, FrameWriter, WireError

logger = logging.getLogger(__name__)

__all__ = ["START_FRAME", "WorkerProcess", "WorkerSpec", "default_worker_count"]


def default_worker_count() -> int:
    """One worker per core this process may run on, or 1 on a single core."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores)


START_FRAME = "start"
"""The first frame on a worker's command pipe: its runtime's config and its secrets."""


@dataclass(frozen=True)
class WorkerSpec:
    """How to start a worker: ``factory`` (``package.module:function``) builds its
    ``Runtime`` from ``config``, a JSON-able value, inside the worker process.

    The config travels in the first frame on the worker's stdin (``start_frame``), not on
    its command line, where ``ps`` shows it to every user (a ``--base-url`` may carry a
    password); so do the environment's secrets (``split_environment``).
    """

    factory: str
    config: Any = None
    env: Mapping[str, str] | None = None
    cwd: str | None = None

    def command(self) -> list[str]:
        return [sys.executable, "-m", "toolprep.runtime.workers.worker", self.factory]

    def split_environment(self) -> tuple[dict[str, str], dict[str, str]]:
        """The worker's environment, and the secrets kept out of it for its pipe.

        Kept out: what the tools would never inherit by name or value
        (``secret_variables``) and what this process withdrew from its own
        environment at start (``withdrawn_names``): the provider key, the serve token,
        cloud credentials. In its environment block another process of the user
        could read them (``/proc/<pid>/environ``); on the pipe only the worker does.
        """
        base = dict(os.environ if self.env is None else self.env)
        secrets = secret_variables(base)
        secrets |= {name: base[name] for name in withdrawn_names() if name in base}
        return {k: v for k, v in base.items() if k not in secrets}, secrets

    def start_frame(self, secrets: Mapping[str, str]) -> dict[str, Any]:
        return {"type": START_FRAME, "config": self.config, "environment": dict(secrets)}


class WorkerProcess:
    """A started worker: frames go in through ``writer`` and come out through ``reader``.

    The ``WorkerTransport`` of a child process on this machine.
    """

    def __init__(self, slot: int, spec: WorkerSpec) -> None:
        self.slot = slot
        env, secrets = spec.split_environment()
        self.process = subprocess.Popen(
            spec.command(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=front_env(env),
            cwd=spec.cwd,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.writer = FrameWriter(self.process.stdin.fileno())
        self.reader = FrameReader(self.process.stdout)
        self._closed = False
        try:
            self.writer.write(spec.start_frame(secrets))
        except OSError as exc:  # it died at once: await_ready reports how
            logger.error("cannot hand worker %d its start frame: %r", slot, exc)

    @property
    def pid(self) -> int:
        return self.process.pid

    def await_ready(self) -> None:
        """Block until the worker built its runtime; raise if it died trying."""
        try:
            first = self.read()
        except (WireError, ProtocolError) as exc:
            first = None
            logger.error("worker %d sent no ready frame: %s", self.slot, exc)
        match first:
            case Ready(protocol=protocol) if protocol == PROTOCOL_VERSION:
                return
            case Ready(protocol=protocol):
                self.kill()
                self.process.wait()
                self.close()
                raise SessionHostError(
                    f"worker {self.slot} speaks worker protocol {protocol}, this front "
                    f"{PROTOCOL_VERSION}: is the install being upgraded under it?"
                )
            case _:
                code = self.process.wait()
                self.close()
                how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
                raise SessionHostError(f"worker {self.slot} did not start ({how})")

    def send(self, command: Command) -> None:
        if self._closed:  # its pipe's descriptor number may belong to another file by now
            raise OSError(f"worker {self.slot} has ended")
        self.writer.write(*encode_command(command))

    def read(self) -> Event | None:
        frame = self.reader.read()
        return None if frame is None else decode_event(*frame)

    def kill(self) -> None:
        self.process.kill()

    def wait(self, timeout: float) -> bool:
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def interrupt(self) -> None:
        # Its SIGTERM handler kills its tool processes, then it exits.
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGTERM)

    def exit_description(self) -> str:
        try:
            code = self.process.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        if code < 0:
            return f"was killed by signal {-code}"
        return f"exited with status {code}"

    def close(self) -> None:
        self._closed = True
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError as exc:  # a broken pipe's buffered bytes cannot be flushed
                    logger.debug("closing a worker pipe: %r", exc)
