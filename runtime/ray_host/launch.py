"""``toolprep serve --ray ADDRESS [--shards N]``: the Ray host built from the command line.

The shards build the very runtime ``toolprep acp`` builds, from the same
options (``runtime_from_options``), so a session behaves alike wherever it
runs; the provider settings the runtime reads from the environment travel
with the job, since a shard starts from the cluster's environment.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

import ray

from toolprep.runtime.hosting.options import RuntimeOptions
from toolprep.runtime.kernel.observer import NO_OBSERVER, TurnObserver
from toolprep.runtime.kernel.session_host import SessionHostError
from toolprep.runtime.ray_host.host import RayHost, connect, forwarded_environment
from toolprep.runtime.telemetry.setup import WORKER_METRICS_VARIABLE
from toolprep.runtime.workers.codec import dump_options
from toolprep.runtime.workers.process import WorkerSpec

if TYPE_CHECKING:
    from toolprep.runtime.store import SessionStore

__all__ = ["default_shard_count", "ray_host_from_options"]

RUNTIME_FACTORY = "toolprep.runtime.hosting.assembly:worker_runtime_from_options"

PROBE_TIMEOUT_S = 5.0
"""How long the head's address may take to accept a connection before the daemon gives up."""


def check_reachable(address: str) -> None:
    """Fail at once when nothing listens at a ``HOST:PORT`` address.

    Ray itself keeps retrying an address with no cluster behind it for more
    than a minute before it says so; ``auto`` and ``ray://`` addresses are
    left to Ray.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise SessionHostError(
            f"cannot join the Ray cluster at {address}: nothing answers there ({reason})"
        ) from None


def default_shard_count() -> int:
    """One shard per CPU the cluster has (each shard reserves one)."""
    resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    return max(1, int(resources.get("CPU", 1)))


def ray_host_from_options(
    address: str,
    shards: int | None,
    options: RuntimeOptions,
    store: SessionStore | None,
    *,
    name: str = "toolprep",
    observer: TurnObserver = NO_OBSERVER,
    serves_metrics: bool = False,
) -> RayHost:
    """Join the cluster at ``address`` and start the shards of the front called ``name``;
    leaving the cluster again on shutdown. ``observer`` hears of a shard that ended; if
    this process ``serves_metrics``, the shards record theirs for it to read.

    Raises ``ValueError`` for a bad count and ``SessionHostError`` when the
    cluster cannot be joined or the shards cannot start.
    """
    if shards is not None and shards < 1:
        raise ValueError(f"--shards must be >= 1, got {shards}")
    check_reachable(address)
    try:
        env_vars = forwarded_environment()
        if serves_metrics:
            env_vars[WORKER_METRICS_VARIABLE] = "1"
        connect(address, env_vars=env_vars)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise SessionHostError(f"cannot join the Ray cluster at {address}: {exc}") from None
    spec = WorkerSpec(RUNTIME_FACTORY, dump_options(options))
    try:
        count = shards if shards is not None else default_shard_count()
        return RayHost(spec, count, store=store, name=name, disconnect=True, observer=observer)
    except BaseException:
        ray.shutdown()
        raise
