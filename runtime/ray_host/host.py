"""``RayHost``: the worker front over shard actors on a Ray cluster.

Everything a ``WorkerHost`` promises holds unchanged, because it is the same
front: placement on the least loaded shard, routing by session id, relayed
frames, and a dead shard's cards discarded, its prompts answered with an
error and its sessions reloaded from the store by a successor. What this
adds is the connection to the cluster and the placement registry that
lets others find a session's shard.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import ray

from toolprep.runtime.kernel.observer import NO_OBSERVER, TurnObserver
from toolprep.runtime.kernel.session_host import SessionHostError
from toolprep.runtime.ray_host.registry import NAMESPACE, RegistryLog, open_registry
from toolprep.runtime.ray_host.transport import START_TIMEOUT_S, ShardLauncher
from toolprep.runtime.workers.backoff import RestartBackoff
from toolprep.runtime.workers.process import WorkerSpec
from toolprep.runtime.workers.worker_host import DEFAULT_BACKOFF, WorkerHost

if TYPE_CHECKING:
    from toolprep.runtime.store import SessionStore

__all__ = ["FORWARDED_VARIABLES", "RayHost", "connect", "forwarded_environment"]

FORWARDED_VARIABLES = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "TOOLPREP_SCRUB_ENV",
    "TOOLPREP_PASS_ENV",
)
"""What a shard's runtime reads from its environment. Shards start from the
cluster's environment, not the front's, so the front passes these along, and every
``OTEL_*`` variable (``FORWARDED_PREFIX``): a shard exports telemetry as the front does."""

FORWARDED_PREFIX = "OTEL_"

REGISTRY_TIMEOUT_S = 60.0


def forwarded_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The front's values of ``FORWARDED_VARIABLES`` that are set."""
    environ = os.environ if environ is None else environ
    return {
        name: value
        for name, value in environ.items()
        if value and (name in FORWARDED_VARIABLES or name.startswith(FORWARDED_PREFIX))
    }


def connect(
    address: str | None,
    *,
    env_vars: Mapping[str, str] | None = None,
    log_to_driver: bool = True,
) -> None:
    """Join the Ray cluster at ``address`` (``auto``, ``HOST:PORT``) as this front's driver.

    ``env_vars`` reach every shard this front starts (through the job's
    runtime environment). Does nothing if this process is connected already.
    """
    if ray.is_initialized():
        return
    runtime_env = {"env_vars": dict(env_vars)} if env_vars else None
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if on_main_thread else None
    ray.init(
        address=address,
        namespace=NAMESPACE,
        runtime_env=runtime_env,
        log_to_driver=log_to_driver,
    )
    if previous is not None:
        # ray.init makes SIGTERM exit the process at once; the front's own handler (a
        # graceful stop: turns cancelled, cards discarded, replies sent) stays in charge.
        signal.signal(signal.SIGTERM, previous)


class RayHost(WorkerHost):
    """Sessions on ``shards`` shard actors, each building its runtime from ``spec``.

    Connect first (``connect``). ``name`` names this front on the cluster (its
    placement registry); ``num_cpus`` is what each shard reserves, and shards
    are spread over the cluster's nodes. With ``disconnect=True`` shutting the
    host down also leaves the cluster. ``observer`` hears of a shard that ended.
    """

    def __init__(
        self,
        spec: WorkerSpec,
        shards: int,
        *,
        store: SessionStore | None = None,
        name: str = "toolprep",
        num_cpus: float = 1.0,
        backoff: RestartBackoff = DEFAULT_BACKOFF,
        start_timeout_s: float = START_TIMEOUT_S,
        disconnect: bool = False,
        observer: TurnObserver = NO_OBSERVER,
    ) -> None:
        if not ray.is_initialized():
            raise SessionHostError(
                "not connected to a Ray cluster: call toolprep.runtime.ray_host.connect first"
            )
        self.registry: Any = open_registry(name)
        ray.get(self.registry.reset.remote(), timeout=REGISTRY_TIMEOUT_S)  # a predecessor's
        self._disconnect = disconnect
        launcher = ShardLauncher(spec, self.registry, num_cpus, start_timeout_s)
        super().__init__(
            spec,
            shards,
            backoff=backoff,
            store=store,
            transport=launcher,
            placements=RegistryLog(self.registry),
            observer=observer,
        )

    def shutdown(self, timeout: float = 10.0) -> None:
        super().shutdown(timeout)
        with contextlib.suppress(Exception):
            ray.get(self.registry.reset.remote(), timeout=min(timeout, REGISTRY_TIMEOUT_S))
        if self._disconnect:
            ray.shutdown()
