"""A throwaway Ray cluster on 127.0.0.1, for a test of the Ray host (toolprep's own tests
and benchmarks use it too).

The cluster gets an authentication token of its own, so nothing is written
to the user's home, usage statistics stay off, and its scratch files go to a
temporary directory. Ray reads these settings once, when it is first
imported, so ``use_loopback_settings`` must run before anything imports
``ray``; processes started afterwards (a ``ray start`` head, a daemon
joining the cluster) inherit them.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

__all__ = ["local_cluster", "use_loopback_settings"]

LOOPBACK = "127.0.0.1"


def use_loopback_settings() -> None:
    """Token auth, no usage reports, and every Ray process on 127.0.0.1."""
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(16))
    os.environ.update(
        {
            "RAY_AUTH_MODE": "token",
            "RAY_USAGE_STATS_ENABLED": "0",
            # Single-node clusters only: each Ray process takes 127.0.0.1 for its own
            # address instead of the machine's outward one, so cluster traffic stays local.
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        }
    )


@contextmanager
def local_cluster(cpus: int, pythonpath: Path) -> Iterator[ModuleType]:
    """``ray``, connected as driver to a fresh head of ``cpus`` CPUs; gone again on exit.

    ``pythonpath`` reaches every worker the cluster starts, so shards can
    import runtime factories that live outside the installed package.
    """
    use_loopback_settings()
    import ray

    from toolprep.runtime.ray_host.registry import NAMESPACE

    scratch = tempfile.mkdtemp(prefix="ray-")
    ray.init(
        address="local",
        num_cpus=cpus,
        include_dashboard=False,
        log_to_driver=False,
        namespace=NAMESPACE,
        runtime_env={"env_vars": {"PYTHONPATH": str(pythonpath)}},
        _node_ip_address=LOOPBACK,
        _temp_dir=scratch,
    )
    try:
        yield ray
    finally:
        ray.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)
