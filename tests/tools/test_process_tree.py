"""``process_tree``: a program run as a subreaper keeps its orphans, and they can be ended.

Real processes: a shell started through ``subreaper_argv`` runs an inner
shell that puts ``sleep`` in the background and exits, so the ``sleep`` is
an orphan; it must be found as the outer shell's descendant and ended by
``end_tree``. The launcher must not import from an ``env``-given
``PYTHONPATH``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.eventually import eventually
from tests.support.processes import gone_within
from toolprep.runtime.tools.process_tree import descendants, end_tree, subreaper_argv

DEADLINE_S = 20.0

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc")


def _parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_an_orphan_stays_the_subreapers_descendant_and_end_tree_ends_it(tmp_path: Path) -> None:
    hijack = tmp_path / "hijack"
    hijack.mkdir()
    marker = tmp_path / "imported"
    (hijack / "ctypes.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    script = 'sh -c "setsid sleep 300 & echo \\$!"; read line'
    outer = subprocess.Popen(
        subreaper_argv(["/bin/sh", "-c", script]),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(hijack)},
        text=True,
    )
    assert outer.stdout is not None and outer.stdin is not None
    try:
        orphan = int(outer.stdout.readline())
        eventually(  # adopted once the inner shell exits
            lambda: _parent_of(orphan) == outer.pid,
            timeout=DEADLINE_S,
            what="the orphan went elsewhere than the subreaper",
        )
        tree = descendants(outer.pid)
        assert orphan in tree
        end_tree(tree)
        assert gone_within(orphan, DEADLINE_S)
    finally:
        outer.stdin.close()
        outer.stdout.close()
        outer.wait(DEADLINE_S)
    assert not marker.exists()


def test_end_tree_leaves_a_reused_pid_alone() -> None:
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        end_tree({bystander.pid: "not its start time"})
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
