"""Every ``SessionHost`` implementation the conformance suite runs against.

Each entry builds a host whose sessions call the loopback fake provider, so
the suite drives real sessions end to end. A new implementation (worker
processes behind a routing front, a cluster) joins the suite by adding an
entry here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO_ROOT
from tests.support.runtime_harness import harness, provider_base_url
from toolprep.runtime.kernel.session_host import SessionHost
from toolprep.runtime.workers import WorkerHost, WorkerSpec
from toolprep.testing import FakeProviderServer

KIND = "anthropic"


@dataclass
class HostUnderTest:
    host: SessionHost
    server: FakeProviderServer
    cwd: Path
    kind: str = KIND


@contextmanager
def local_host(cwd: Path) -> Iterator[HostUnderTest]:
    """The in-process ``Runtime``: role actors in this process, streams on asyncio's loop."""
    with harness(KIND, cwd) as h:
        yield HostUnderTest(h.runtime, h.server, cwd)


@contextmanager
def local_uvloop_host(cwd: Path) -> Iterator[HostUnderTest]:
    """The in-process ``Runtime`` with its streams on uvloop (the ``uvloop`` extra)."""
    with harness(KIND, cwd, event_loop="uvloop") as h:
        yield HostUnderTest(h.runtime, h.server, cwd)


def worker_spec(kind: str, server: FakeProviderServer) -> WorkerSpec:
    """Workers building ``tests.session_host.worker_runtime``'s runtime against ``server``."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    config = {"kind": kind, "base_url": provider_base_url(kind, server)}
    return WorkerSpec("tests.session_host.worker_runtime:build", config, env, str(REPO_ROOT))


@contextmanager
def worker_host(cwd: Path) -> Iterator[HostUnderTest]:
    """``WorkerHost``: sessions spread over two worker processes behind a routing front."""
    with FakeProviderServer() as server:
        host = WorkerHost(worker_spec(KIND, server), workers=2)
        try:
            yield HostUnderTest(host, server, cwd)
        finally:
            host.shutdown(timeout=5)


IMPLEMENTATIONS: dict[str, Callable[[Path], AbstractContextManager[HostUnderTest]]] = {
    "local": local_host,
    "local-uvloop": local_uvloop_host,
    "workers": worker_host,
}
# Implementations that start processes: their tests are in the ``process`` tier.
STARTS_PROCESSES = frozenset({"workers"})
# Implementations whose set-up costs most of a test's time: one host per test module,
# shared by its tests (see ``conftest.py``).
SHARED = frozenset({"workers"})
