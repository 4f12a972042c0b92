"""A local Ray cluster on loopback, started once for the test session and shared by its tests.

Skipped, with the rest of the module's tests, when ``ray`` is not installed
(it is part of the ``test`` extra, so CI runs them). The loopback settings
are applied as this file loads, before any test module imports ``ray``.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

from tests.conftest import REPO_ROOT
from toolprep.testing.ray_cluster import local_cluster, use_loopback_settings

CLUSTER_CPUS = 2

use_loopback_settings()


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[ModuleType]:
    """``ray``, connected to a two-CPU head on 127.0.0.1; starting one takes seconds, so the
    modules share it (each starts and stops its own shards, named apart by ``--ray-name``)."""
    pytest.importorskip("ray")
    with local_cluster(CLUSTER_CPUS, REPO_ROOT) as ray:
        yield ray
