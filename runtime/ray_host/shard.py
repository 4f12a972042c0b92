"""A shard: one Ray actor running one whole ``Runtime`` for the sessions placed on it.

It runs the very command loop a worker process runs (``WorkerLoop``); only
the bytes travel differently. Commands arrive as method calls, one encoded
wire frame each, and run one at a time in the order the front sent them (the
``commands`` concurrency group has one thread, and Ray runs one caller's
calls in submission order). Frames leave through ``frames``, a streaming
generator the front iterates for the shard's whole life, in the
``frames`` group so it never waits behind a command (nor does ``pid``, in
``probes``).
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Iterator
from typing import Any

import ray

from toolprep.runtime.process.tuning import tune_process_for_daemon
from toolprep.runtime.ray_host.outbox import Outbox
from toolprep.runtime.tools.group_reaper import GroupReaper
from toolprep.runtime.workers.protocol import Command, ProtocolError, Ready, decode_command
from toolprep.runtime.workers.wire import FrameReader, WireError
from toolprep.runtime.workers.worker import WorkerLoop, load_factory

logger = logging.getLogger(__name__)

__all__ = ["Shard", "ShardActor"]


def decode_frame(frame: bytes) -> Command:
    decoded = FrameReader(io.BytesIO(frame)).read()
    if decoded is None:
        raise WireError("an empty command")
    return decode_command(*decoded)


class Shard:
    """The actor's state; ``ShardActor`` is the class Ray creates."""

    def __init__(self, factory: str, config: Any) -> None:
        self._outbox = Outbox()
        self._runtime = load_factory(factory)(config)
        # Killed outright, this process stops nothing: a watcher beside it kills its tools.
        self._reaper = GroupReaper()
        for groups in self._runtime.watched_process_groups():
            groups.on_change = self._reaper.changed
        tune_process_for_daemon()
        self._loop = WorkerLoop(self._runtime, self._outbox)
        self._ended = False
        self._outbox.write(Ready(os.getpid()))

    @ray.method(concurrency_group="commands")
    def command(self, frame: bytes) -> None:
        """Carry out one command; after the last one (shutdown) the frame stream ends."""
        if self._ended:
            return
        try:
            going_on = self._loop.step(decode_frame(frame))
        except (WireError, ProtocolError) as exc:
            logger.error("the front sent something that is no command (%s); stopping", exc)
            self._runtime.shutdown()
            going_on = False
        except Exception:
            # A worker process dies of this and its front replaces it; so does a shard.
            logger.exception("a command failed; stopping")
            self._runtime.shutdown()
            going_on = False
        if not going_on:
            self._end()

    @ray.method(concurrency_group="probes")
    def pid(self) -> int:
        """This shard's process id; answered at once, even while a command runs."""
        return os.getpid()

    @ray.method(concurrency_group="frames", num_returns="streaming")
    def frames(self) -> Iterator[bytes]:
        """Every frame this shard sends, in batches, until it ends."""
        yield from self._outbox.batches()

    def _end(self) -> None:
        self._ended = True
        if self._runtime.store is not None:  # closing it checkpoints the WAL
            self._runtime.store.close()
        self._reaper.stop()
        self._outbox.close()


ShardActor = ray.remote(  # type: ignore[call-overload]  # the stubs lack concurrency_groups
    concurrency_groups={"commands": 1, "frames": 1, "probes": 1},
    max_restarts=0,
)(Shard)
"""Created by the front's transport with per-front options (resources, placement)."""
