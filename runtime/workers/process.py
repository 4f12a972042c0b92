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

import orjson

from toolprep.runtime.session_host import SessionHostError
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

__all__ = ["WorkerProcess", "WorkerSpec", "default_worker_count"]


def default_worker_count() -> int:
    """One worker per core this process may run on, or 1 on a single core."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores)


@dataclass(frozen=True)
class WorkerSpec:
    """How to start a worker: ``factory`` (``package.module:function``) builds its
    ``Runtime`` from ``config``, a JSON-able value, inside the worker process."""

    factory: str
    config: Any = None
    env: Mapping[str, str] | None = None
    cwd: str | None = None

    def command(self) -> list[str]:
        config = orjson.dumps(self.config).decode()
        return [sys.executable, "-m", "toolprep.runtime.workers.worker", self.factory, config]


class WorkerProcess:
    """A started worker: frames go in through ``writer`` and come out through ``reader``.

    The ``WorkerTransport`` of a child process on this machine.
    """

    def __init__(self, slot: int, spec: WorkerSpec) -> None:
        self.slot = slot
        self.process = subprocess.Popen(
            spec.command(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=front_env(dict(os.environ if spec.env is None else spec.env)),
            cwd=spec.cwd,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.writer = FrameWriter(self.process.stdin.fileno())
        self.reader = FrameReader(self.process.stdout)
        self._closed = False

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
