"""Signals to ``toolprep serve``: SIGHUP stops it as SIGTERM does, SIGQUIT only dumps stacks.

A daemon whose terminal or ssh session goes away gets SIGHUP; it must end
the way a service manager's SIGTERM ends it, every running turn cancelled
and its prompt answered before the sockets close. SIGQUIT asks where every
thread is, and must not cost the sessions anything.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest

from tests.daemon.conftest import KIND, StartDaemon
from tests.runtime import scenarios as sc
from tests.support.daemon_process import DaemonProcess
from tests.support.eventually import eventually
from tests.support.processes import alive, worker_pids_of
from tests.support.runtime_harness import lifecycle
from toolprep.testing import FakeProviderServer

DEADLINE_S = 60.0  # far above what a clean stop takes; only a hang comes near it


def _stopped_by(daemon: DaemonProcess, signum: signal.Signals) -> int:
    daemon.process.send_signal(signum)
    return daemon.process.wait(DEADLINE_S)


def _has_stack_dump(log: str) -> bool:
    """faulthandler's format: a ``Thread 0x...`` header, then ``File "...", line N`` lines."""
    return (
        re.search(r"^(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):$", log, re.M)
        is not None
        and re.search(r'^  File ".+", line \d+ in \w+$', log, re.M) is not None
    )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_stop_signal_mid_turn_answers_the_prompt_and_discards_the_card(
    signum: signal.Signals, start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path
) -> None:
    daemon = start_daemon("--no-persist", "--workers", "2")
    provider.enqueue(sc.prepared_then_stall(KIND, ("call_stall", "get_weather", {})))
    client = daemon.client()
    try:
        session_id = client.start_session(workdir)
        turn = client.prompt(session_id)
        client.wait_for(lambda _: "call_stall" in lifecycle(client.updates(session_id)))
        daemon.process.send_signal(signum)
        assert client.result(turn, DEADLINE_S)["stopReason"] == "cancelled"
        assert lifecycle(client.updates(session_id)) == {"call_stall": ["preparing", "discarded"]}
        client.wait_closed(DEADLINE_S)
    finally:
        client.close()
    assert daemon.process.wait(DEADLINE_S) == 0
    assert "Traceback" not in daemon.stderr()


def test_sigquit_dumps_every_thread_and_the_daemon_goes_on(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path
) -> None:
    daemon = start_daemon("--no-persist", "--workers", "1")
    provider.enqueue(sc.ok(sc.text_turn(KIND, "still here")))
    client = daemon.client()
    try:
        session_id = client.start_session(workdir)
        daemon.process.send_signal(signal.SIGQUIT)

        def dumped() -> bool:
            assert daemon.process.poll() is None, daemon.stderr()
            return _has_stack_dump(daemon.stderr())

        eventually(dumped, timeout=DEADLINE_S, interval=0.05)
        log = daemon.stderr()
        assert _has_stack_dump(log), log
        assert re.search(r"^Thread 0x", log, re.M), log  # the other threads too, not just one
        assert client.result(client.prompt(session_id), DEADLINE_S)["stopReason"] == "end_turn"
    finally:
        client.close()
    assert _stopped_by(daemon, signal.SIGTERM) == 0


def test_workers_outlive_a_hangup_of_the_group_and_dump_their_stacks(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path
) -> None:
    """A closed terminal signals the whole process group: the workers leave ending to
    their front, and Ctrl-\\ dumps their stacks as it does the front's."""
    daemon = start_daemon("--no-persist", "--workers", "2")
    workers = worker_pids_of(daemon.process.pid)
    assert len(workers) == 2
    for pid in workers:
        os.kill(pid, signal.SIGHUP)
        os.kill(pid, signal.SIGQUIT)
    eventually(
        lambda: daemon.stderr().count("Current thread 0x") >= 2, timeout=DEADLINE_S, interval=0.05
    )
    assert daemon.stderr().count("Current thread 0x") == 2, daemon.stderr()
    assert all(alive(pid) for pid in workers)
    provider.enqueue(sc.ok(sc.text_turn(KIND, "still here")))
    client = daemon.client()
    try:
        session_id = client.start_session(workdir)
        assert client.result(client.prompt(session_id), DEADLINE_S)["stopReason"] == "end_turn"
    finally:
        client.close()
    assert sorted(worker_pids_of(daemon.process.pid)) == sorted(workers)  # none was replaced
    assert _stopped_by(daemon, signal.SIGTERM) == 0
