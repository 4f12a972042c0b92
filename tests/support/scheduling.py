"""How ``pytest -n N --dist loadfile`` hands the test files to its workers.

xdist's file scheduling keeps a module's tests on one worker (so a module's shared agents
start once) and hands out files biggest first, by test count. Two changes:

- **Files that share an expensive fixture go together.** The Ray tests' two modules share
  a session-scoped local Ray cluster; on two workers each would start one, the slowest
  set-up of the suite. ``SHARED_SCOPES`` names the folders whose files are one unit.
- **The slow files go first.** A file that starts agents or daemons takes seconds a test;
  one that stays in the process, milliseconds. By count alone a file of two hundred quick
  tests goes ahead of a file of four that each run an agent through ten restarts, and the
  run ends waiting on the latter while the other workers idle. ``SLOW_FILES`` (the longest
  files in the ``--durations`` report, slowest first) go first, then the files under
  ``PROCESS_FOLDERS`` (most of whose tests start processes), biggest first; the quick
  files then fill in the gaps at the end.
"""

from __future__ import annotations

from typing import Final

import pytest
from xdist.scheduler import LoadFileScheduling
from xdist.workermanage import WorkerController

__all__ = ["PROCESS_FOLDERS", "SHARED_SCOPES", "SLOW_FILES", "SlowFirstFileScheduling"]

SHARED_SCOPES: Final = ("tests/ray_host/",)
SLOW_FILES: Final = (
    "tests/ray_host/",
    "tests/acp/test_frame_log.py",
    "tests/acp/test_oversized_prompt.py",
    "tests/benchmarks/test_load_cli_mode.py",
    "tests/acp/test_session_surface.py",
    "tests/daemon/test_serve.py",
    "tests/acp/test_instant_answers.py",
)
PROCESS_FOLDERS: Final = (
    "tests/ray_host/",
    "tests/acp/",
    "tests/daemon/",
    "tests/workers/",
    "tests/benchmarks/",
    "tests/session_host/",
    "tests/telemetry/",
    "tests/faults/",
)


class SlowFirstFileScheduling(LoadFileScheduling):  # type: ignore[misc]  # xdist is untyped
    """``--dist loadfile``, with shared-fixture folders as one unit and slow files first."""

    def _split_scope(self, nodeid: str) -> str:
        scope: str = super()._split_scope(nodeid)
        return next((folder for folder in SHARED_SCOPES if scope.startswith(folder)), scope)

    def _assign_work_unit(self, node: WorkerController) -> None:
        heaviest = max(self.workqueue, key=lambda scope: _weight(scope, self.workqueue[scope]))
        self.workqueue.move_to_end(heaviest, last=False)
        super()._assign_work_unit(node)


def _weight(scope: str, tests: dict[str, bool]) -> tuple[int, bool, int]:
    """Larger goes first: a listed slow file by its place in the list, then a process
    folder's file, then more tests."""
    slow = next((len(SLOW_FILES) - i for i, f in enumerate(SLOW_FILES) if scope.startswith(f)), 0)
    return slow, scope.startswith(PROCESS_FOLDERS), len(tests)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> LoadFileScheduling | None:
    if config.getoption("dist") != "loadfile":
        return None
    return SlowFirstFileScheduling(config, log)
