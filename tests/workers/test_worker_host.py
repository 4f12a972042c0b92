"""``WorkerHost`` edge cases, with real worker processes and the loopback provider."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.runtime import scenarios as sc
from tests.session_host.hosts import worker_spec
from tests.session_host.recording import RecordingFrameSink
from tests.support.eventually import eventually
from tests.support.processes import gone_within
from toolprep.messages.content import TextPart
from toolprep.runtime.kernel.session_host import NoWorkerAvailable, SessionHostError
from toolprep.runtime.workers import WorkerHost, WorkerSpec
from toolprep.runtime.workers.backoff import RestartBackoff
from toolprep.runtime.workers.wire import FrameReader, FrameWriter
from toolprep.testing import FakeProviderServer

KIND = "anthropic"
TURN_S = 20.0


@pytest.mark.parametrize(
    ("factory", "config"),
    [
        ("toolprep.runtime.workers.worker:no_such_function", None),
        ("not a factory name", None),
        ("tests.session_host.worker_runtime:build", {}),  # the factory itself raises
    ],
)
def test_workers_that_cannot_build_a_runtime_fail_the_host_clearly(
    factory: str, config: object
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    with pytest.raises(SessionHostError, match=r"worker 0 did not start \(exit status 2\)"):
        WorkerHost(WorkerSpec(factory, config, env), workers=2)


LONG_WAIT = RestartBackoff(first_delay=3600.0, max_delay=3600.0)
"""A second crash in a row keeps the slot down for the rest of the test."""


def _kill_and_await_replacement(host: WorkerHost, pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    assert gone_within(pid, TURN_S)

    def replaced() -> bool:
        assert pid not in host.worker_pids(), host.worker_pids()
        return True

    eventually(replaced, timeout=TURN_S, interval=0.05)


def test_a_slot_that_keeps_dying_waits_and_the_others_serve(tmp_path: Path) -> None:
    with FakeProviderServer() as server:
        host = WorkerHost(worker_spec(KIND, server), workers=2, backoff=LONG_WAIT)
        try:
            doomed_sink, other_sink = RecordingFrameSink(), RecordingFrameSink()
            doomed = host.open_session(tmp_path, doomed_sink)
            other = host.open_session(tmp_path, other_sink)
            doomed_slot = host.slot_of(doomed)
            first = host.worker_pids()[doomed_slot]
            _kill_and_await_replacement(host, first)
            # A first crash is replaced at once, and the session moved over.

            def both_up() -> bool:
                assert len(host.worker_pids()) == 2, host.worker_pids()
                return True

            eventually(both_up, timeout=TURN_S, interval=0.05)
            assert host.restarts == 1
            successor = host.worker_pids()[doomed_slot]
            _kill_and_await_replacement(host, successor)
            (second,) = host.worker_pids()
            # Refused at once, or once the slot's wait is known: either way, naming the wait.
            with pytest.raises(NoWorkerAvailable) as refused:
                host.prompt(doomed, [TextPart("hello")]).result(TURN_S)
            message = str(refused.value)
            assert message.startswith(
                f"no worker available: worker {doomed_slot} was killed by signal 9 (2 times in "
            ), message
            assert message.endswith("s); next restart in 3600 s"), message
            assert 3500 < refused.value.retry_after <= 3600
            with pytest.raises(NoWorkerAvailable) as refused:  # a setting too, not a crash
                host.set_mode(doomed, "plan")
            assert refused.value.retry_after > 3500

            server.enqueue(sc.ok(sc.text_turn(KIND, "Fine here.")), sc.ok(sc.text_turn(KIND)))
            assert host.prompt(other, [TextPart("hello")]).result(TURN_S).stop_reason == "end_turn"
            newcomer = host.open_session(tmp_path, RecordingFrameSink())
            assert host.slot_of(newcomer) != doomed_slot
            assert host.prompt(newcomer, [TextPart("hi")]).result(TURN_S).stop_reason == "end_turn"
            assert host.worker_pids() == [second]
        finally:
            host.shutdown(timeout=5)  # wakes the waiting slot: the test ends now, not in an hour


def test_with_every_slot_waiting_a_new_session_is_refused_naming_the_wait(
    tmp_path: Path,
) -> None:
    with FakeProviderServer() as server:
        host = WorkerHost(worker_spec(KIND, server), workers=1, backoff=LONG_WAIT)
        try:
            _kill_and_await_replacement(host, host.worker_pids()[0])
            eventually(host.worker_pids, timeout=TURN_S, interval=0.05)
            _kill_and_await_replacement(host, host.worker_pids()[0])
            with pytest.raises(NoWorkerAvailable) as refused:
                host.open_session(tmp_path, RecordingFrameSink())
            message = str(refused.value)
            assert message.startswith(
                "no worker available: worker 0 was killed by signal 9 (2 times in "
            ), message
            assert message.endswith("s); next restart in 3600 s"), message
            assert 3500 < refused.value.retry_after <= 3600
        finally:
            host.shutdown(timeout=5)


def test_a_worker_given_a_broken_command_stops_with_a_clear_error(tmp_path: Path) -> None:
    with FakeProviderServer() as server:
        spec = worker_spec(KIND, server)
        process = subprocess.Popen(
            spec.command(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(spec.env or {}),
            cwd=spec.cwd,
        )
        assert process.stdin is not None and process.stdout is not None
        try:
            FrameWriter(process.stdin.fileno()).write(spec.start_frame({}))
            ready = FrameReader(process.stdout).read()
            assert ready is not None and ready[0]["type"] == "ready"
            FrameWriter(process.stdin.fileno()).write({"type": "explode", "call": 1})
            _out, err = process.communicate(timeout=TURN_S)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            for pipe in (process.stdin, process.stdout, process.stderr):
                if pipe is not None and not pipe.closed:
                    pipe.close()
        assert process.returncode == 1
        assert b"not a worker command: {'type': 'explode', 'call': 1}" in err


def test_the_worker_entry_point_explains_its_usage() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "toolprep.runtime.workers.worker"],
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert b"usage: python -m toolprep.runtime.workers.worker FACTORY " in done.stderr
