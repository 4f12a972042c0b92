"""Repository-wide test setup: make ``tests.support`` importable from every test directory."""

from __future__ import annotations

import faulthandler
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pykka
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

EXIT_WATCHDOG_S = 120

# The ``process`` marker, set automatically, and the fast tier's guard (CONTRIBUTING.md).
pytest_plugins = ["tests.support.tiers"]


def pytest_configure(config: pytest.Config) -> None:
    """Agents the tests start keep sessions by default: never in the user's own data directory."""
    data_home = Path(tempfile.mkdtemp(prefix="toolprep-test-data-"))
    os.environ["XDG_DATA_HOME"] = str(data_home)
    config.add_cleanup(lambda: shutil.rmtree(data_home, ignore_errors=True))


@pytest.fixture(autouse=True)
def no_actor_outlives_its_test() -> Iterator[None]:
    """A test stops every actor it starts; a leaked non-daemon actor thread blocks exit."""
    before = set(pykka.ActorRegistry.get_all())
    yield
    leaked = [ref for ref in pykka.ActorRegistry.get_all() if ref not in before]
    if leaked:
        for ref in leaked:
            ref.stop(block=False)
        pytest.fail(f"actors still running after the test: {[str(r) for r in leaked]}")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Should anything keep the interpreter from exiting, say what, then exit with an error."""
    faulthandler.dump_traceback_later(EXIT_WATCHDOG_S, exit=True)
