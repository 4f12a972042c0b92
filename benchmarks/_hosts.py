"""The session hosts ``benchmarks.load --host`` puts behind the same embedded agent.

``local`` is the ``Runtime`` in the benchmark's process; ``workers`` the
worker front over N worker processes; ``ray`` the same front over N shard
actors on a Ray cluster started for the run on 127.0.0.1. Every worker or
shard builds ``bench_runtime``: the runtime of the ``local`` run (the same
provider on the same loopback server, the same no-op tool), so the runs
differ only in where the sessions live and how their frames travel.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from benchmarks import _harness as h

HOSTS = ("local", "workers", "ray")


def bench_runtime(config: dict[str, Any]) -> Any:
    """A worker's or shard's runtime (``WorkerSpec`` factory): the ``local`` run's runtime."""
    from benchmarks._transports import bench_config, build_bench_provider
    from toolprep.runtime.hosting.runtime import Runtime
    from toolprep.runtime.providers.routes import ModelRoute

    transport = config["transport"]
    provider = build_bench_provider(
        config["provider"], config["base_url"], config["sessions"], 1, None, transport
    )
    return Runtime([ModelRoute(provider, "bench")], h.bench_registry(), bench_config(transport))


def host_label(host: str, shards: int) -> str:
    """How a run over ``host`` is named in tables and reports."""
    return "embedded" if host == "local" else f"host-{host}{shards}"


@contextmanager
def session_host(
    host: str, shards: int, provider: str, base_url: str, sessions: int, transport: str
) -> Iterator[Any]:
    """A ``workers`` or ``ray`` host of ``shards`` runtimes; shut down (and the cluster with
    it) on exit."""
    from toolprep.runtime.workers import WorkerSpec

    config = {
        "provider": provider,
        "base_url": base_url,
        "sessions": sessions,
        "transport": transport,
    }
    spec = WorkerSpec(
        "benchmarks._hosts:bench_runtime",
        config,
        {**os.environ, "PYTHONPATH": str(h.REPO)},
        str(h.REPO),
    )
    if host == "workers":
        from toolprep.runtime.workers import WorkerHost

        workers = WorkerHost(spec, shards)
        try:
            yield workers
        finally:
            workers.shutdown()
        return
    if host != "ray":
        raise ValueError(f"unknown host {host!r}: use one of {', '.join(HOSTS)}")
    from toolprep.testing.ray_cluster import local_cluster

    with local_cluster(shards, h.REPO):
        from toolprep.runtime.ray_host import RayHost  # ray reads its settings on import

        shard_host = RayHost(spec, shards)
        try:
            yield shard_host
        finally:
            shard_host.shutdown()
