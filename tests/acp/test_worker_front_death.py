"""Workers die with their front: ``kill -9`` of ``toolprep acp --workers 2`` leaves none behind."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from tests.support.agent_process import agent_command
from tests.support.eventually import eventually
from tests.support.processes import gone_within
from toolprep.testing import FakeProviderServer

DEADLINE_S = 30.0


def children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found.update(int(c) for c in (task / "children").read_text().split())
    return found


def workers_of(pid: int, count: int) -> set[int]:
    """Poll until ``pid`` has ``count`` child processes."""

    def all_there() -> set[int]:
        found = children(pid)
        assert len(found) == count, f"the front never had {count} workers: {found}"
        return found

    return eventually(all_there, timeout=DEADLINE_S, interval=0.05)


def test_idle_workers_die_when_the_front_is_killed(tmp_path: Path) -> None:
    with FakeProviderServer() as server:
        command, env = agent_command("anthropic", server, "--workers", "2")
        with subprocess.Popen(
            command,
            env=env,
            cwd=tmp_path,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ) as front:
            workers = workers_of(front.pid, 2)
            front.send_signal(signal.SIGKILL)
            assert front.wait() == -signal.SIGKILL
        survivors = {pid for pid in workers if not gone_within(pid, DEADLINE_S)}
        assert not survivors, f"workers outlived their front: {survivors}"
