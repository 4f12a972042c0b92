"""A worker ends with its front's process, not with the thread that started it.

The front here is a real python process that starts a worker through
``WorkerProcess`` from a thread that then ends, as a front does when it
replaces a dead worker from a reader thread. A second process holds the
worker's stdin open, so the pipe never closes: what ends the worker must be
the death of its front, not the end of its input.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import orjson

from tests.conftest import REPO_ROOT
from tests.session_host.hosts import worker_spec
from tests.support.processes import alive, gone_within
from toolprep.testing import FakeProviderServer

DEADLINE_S = 30.0

FRONT = """
import subprocess, sys, threading, time
import orjson
from toolprep.runtime.workers.process import WorkerProcess, WorkerSpec
from toolprep.runtime.workers.protocol import ShowConfig

factory, config, env, cwd = orjson.loads(sys.argv[1])
started = []


def start():
    worker = WorkerProcess(0, WorkerSpec(factory, config, env, cwd))
    worker.await_ready()  # it asked for its death signal before it said ready
    started.append(worker)


starter = threading.Thread(target=start)
starter.start()
starter.join()
[worker] = started
holder = subprocess.Popen(["sleep", "600"], pass_fds=[worker.process.stdin.fileno()])
worker.send(ShowConfig(1, "no-such-session"))
answer = worker.read()
print(worker.pid, holder.pid, answer.call_id if answer else "none", flush=True)
time.sleep(600)
"""


def test_a_worker_outlives_its_starting_thread_and_dies_with_its_front(tmp_path: Path) -> None:
    with FakeProviderServer() as server:
        spec = worker_spec("anthropic", server)
        assert spec.env is not None
        argument = orjson.dumps([spec.factory, spec.config, dict(spec.env), spec.cwd]).decode()
        with subprocess.Popen(
            [sys.executable, "-c", FRONT, argument],
            cwd=REPO_ROOT,
            env=dict(spec.env),
            stdout=subprocess.PIPE,
            text=True,
        ) as front:
            assert front.stdout is not None
            worker_pid, holder_pid, answered = front.stdout.readline().split()
            try:
                # It answered after the thread that started it had ended.
                assert answered == "1"
                assert alive(int(worker_pid))
                front.send_signal(signal.SIGKILL)
                assert front.wait() == -signal.SIGKILL
                assert gone_within(int(worker_pid), DEADLINE_S), "the worker outlived its front"
            finally:
                front.kill()
                subprocess.run(["kill", "-9", worker_pid, holder_pid], check=False)
                front.stdout.close()
