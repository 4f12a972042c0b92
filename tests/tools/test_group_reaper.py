"""The group reaper: a dead process's tool process groups do not outlive it.

Real processes throughout: the watcher the reaper starts, and process
groups that stand in for a shell command and its background child. The end
of the pipe is how the watcher learns its process died; ``stop`` closes it
the same way a kill would.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator

import pytest

from tests.support.processes import alive, gone_within
from toolprep.runtime.tools.group_reaper import GroupReaper, watch
from toolprep.runtime.tools.process_groups import signal_group

DEADLINE_S = 20.0


@pytest.fixture
def groups() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        signal_group(process.pid, signal.SIGKILL)
        process.wait()


def _group(groups: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """A process group as the shell tool starts one: a leader with a child of its own."""
    leader = subprocess.Popen(["sh", "-c", "sleep 300 & wait"], start_new_session=True)
    groups.append(leader)
    return leader


def test_the_groups_still_listed_when_the_pipe_ends_are_killed(
    groups: list[subprocess.Popen[bytes]],
) -> None:
    live, finished = _group(groups), _group(groups)
    reaper = GroupReaper()
    reaper.changed(live.pid, True)
    reaper.changed(finished.pid, True)
    reaper.changed(finished.pid, False)  # its command ended: no longer the reaper's business
    reaper.stop()
    assert gone_within(live.pid, DEADLINE_S)
    live.wait()
    assert alive(finished.pid)


def test_lines_that_are_no_group_are_ignored() -> None:
    assert watch([b"+12\n", b"+x\n", b"13\n", b"+14\n", b"-12\n", b""]) == {14}
