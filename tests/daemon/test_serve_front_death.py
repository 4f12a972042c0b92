"""``kill -9`` of ``toolprep serve --workers 2`` mid-turn: its workers run nothing more.

A worker that outlived its front would finish the running tool call and start
the next one the model asked for, changing files while nobody watches.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.acp.test_worker_front_death import DEADLINE_S, workers_of
from tests.daemon.conftest import KIND, StartDaemon
from tests.runtime import scenarios as sc
from tests.support.eventually import eventually
from tests.support.processes import alive, gone_within, pid_from
from toolprep.testing import FakeProviderServer


def group_members(pgid: int) -> list[int]:
    members: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and alive(int(entry.name)):
            members.append(int(entry.name))
    return members


def test_a_killed_front_takes_its_workers_and_their_tool_calls_along(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path
) -> None:
    daemon = start_daemon("--no-persist", "--allow-shell", "--sandbox", "off", "--workers", "2")
    # Sleeps longer than the waits below: a command left running could not end on its own
    # in time and pass for one that was stopped.
    first = sc.shell("echo $$ > shell.pid; sleep 120; touch first.marker", "call_first")
    second = sc.shell("touch second.marker", "call_second")
    provider.enqueue(
        sc.ok(sc.calls_turn(KIND, [first, second])),
        sc.ok(sc.text_turn(KIND)),
    )
    workers = workers_of(daemon.process.pid, 2)
    client = daemon.client()
    try:
        session_id = client.start_session(workdir)
        client.prompt(session_id)
        shell_pid = pid_from(workdir / "shell.pid", DEADLINE_S)
        tool_group = os.getpgid(shell_pid)
        daemon.process.send_signal(signal.SIGKILL)
        assert daemon.process.wait() == -signal.SIGKILL
    finally:
        client.close()
    survivors = {pid for pid in workers if not gone_within(pid, DEADLINE_S)}
    assert not survivors, f"workers outlived their front: {survivors}"
    assert gone_within(shell_pid, DEADLINE_S)
    # Killed together, the group's members still end one by one (each when next scheduled).
    eventually(
        lambda: group_members(tool_group) == [],
        timeout=DEADLINE_S,
        what=f"the tool's process group {tool_group} ended: ",
    )
    # The workers are gone, so nothing is left that could still write the markers.
    assert not (workdir / "first.marker").exists()
    assert not (workdir / "second.marker").exists()
