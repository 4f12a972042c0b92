"""One data directory, one daemon: a second ``toolprep serve`` (or a ``connect --start`` that
would start one) refuses, naming the daemon that runs; a killed daemon's directory, and a
stale ``serve.json``, take a new one.

Real daemons on one ``--data-dir``; the one that runs is checked through ``toolprep
connect``, as an editor reaches it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.daemon.conftest import KIND, StartDaemon
from tests.runtime import scenarios as sc
from tests.support.agent_process import AgentProcess, connect_command
from tests.support.daemon_process import DaemonProcess, daemon_environment, stop_started_daemons
from tests.support.processes import gone_within, worker_pids_of
from tests.support.runtime_harness import message_text, provider_base_url
from tests.support.small_disk import small_disk
from toolprep.runtime.daemon.discovery import read_daemon_file
from toolprep.testing import FakeProviderServer
from toolprep.testing.daemon import serve_command


def _serve_refused(
    provider: FakeProviderServer, data: Path, cwd: Path, env_extra: dict[str, str] | None = None
) -> str:
    """A second ``toolprep serve --data-dir DATA``, which must exit 2; its stderr."""
    done = subprocess.run(
        serve_command(KIND, provider_base_url(KIND, provider), "--data-dir", str(data)),
        capture_output=True,
        cwd=cwd,
        env=daemon_environment(env_extra),
        timeout=60,
        text=True,
    )
    assert done.returncode == 2, done.stderr
    return done.stderr


def _connect(data: Path, cwd: Path, log: Path, *options: str) -> AgentProcess:
    return AgentProcess(
        connect_command("--data-dir", str(data), *options), daemon_environment(), cwd, log
    )


def _prompted_through_connect(
    data: Path, provider: FakeProviderServer, workdir: Path, log: Path
) -> None:
    """``toolprep connect --data-dir DATA`` finds the daemon and a prompt is answered."""
    editor = _connect(data, workdir, log)
    try:
        session_id = editor.start_session(workdir)
        provider.enqueue(sc.ok(sc.text_turn(KIND, "Still the first.")))
        assert editor.result(editor.prompt(session_id))["stopReason"] == "end_turn"
        assert message_text(editor.updates(session_id)) == "Still the first."
    finally:
        editor.kill()


def _only_line(said: str) -> str:
    assert said.count("\n") == 1, said
    return said.strip()


def test_a_second_daemon_refuses_naming_the_first_which_stays_found_and_serving(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    first = start_daemon("--data-dir", str(data), "--workers", "1")
    pid = first.process.pid

    line = _only_line(_serve_refused(provider, data, workdir))
    assert line.startswith(f"toolprep: another toolprep serve (pid {pid}, {first.url}) ")
    assert f"already runs on the data directory {data}" in line
    assert f"kill {pid}" in line

    assert json.loads((data / "serve.json").read_text(encoding="utf-8"))["pid"] == pid
    _prompted_through_connect(data, provider, workdir, tmp_path / "connect.log")
    assert first.stop() == 0
    assert not (data / "serve.json").exists()


def test_connect_start_does_not_start_a_second_daemon_beside_one_that_runs(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    first = start_daemon("--data-dir", str(data), "--workers", "1")
    (data / "serve.json").unlink()  # nothing says where it is: --start would start one

    editor = _connect(data, workdir, tmp_path / "connect.log", "--start")
    try:
        assert editor.wait_exit() == 2
        line = _only_line(editor.stderr())
        assert line.startswith(
            f"toolprep connect: --start: not started: another toolprep serve "
            f"(pid {first.process.pid}) already runs on the data directory {data}"
        )
        assert not (data / "serve.json").exists()  # nothing started that wrote one
        assert first.process.poll() is None
    finally:
        editor.kill()
        stop_started_daemons(data)  # the first, and a second one had it been started


def test_a_killed_daemon_and_its_stale_serve_json_leave_the_directory_to_the_next(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    killed = start_daemon("--data-dir", str(data), "--workers", "1")
    workers = worker_pids_of(killed.process.pid)
    killed.kill()  # SIGKILL: no clean exit, its serve.json and serve.lock stay
    assert all(gone_within(pid, 60) for pid in workers)
    assert read_daemon_file(data).pid == killed.process.pid

    second = start_daemon("--data-dir", str(data), "--workers", "1")
    assert read_daemon_file(data).pid == second.process.pid
    _prompted_through_connect(data, provider, workdir, tmp_path / "connect.log")
    # It holds the directory in turn: a third is refused, naming it.
    line = _only_line(_serve_refused(provider, data, workdir))
    assert f"(pid {second.process.pid}, {second.url})" in line
    assert second.stop() == 0


def test_a_serve_json_naming_a_live_process_that_is_no_daemon_does_not_block(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path, tmp_path: Path
) -> None:
    """The lock decides, not the pid a file names: that pid may be reused by anything."""
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    stranger = subprocess.Popen(["sleep", "600"])
    try:
        stale = {"url": "ws://127.0.0.1:9/acp", "token": "t" * 43, "pid": stranger.pid}
        (data / "serve.json").write_text(json.dumps(stale), encoding="utf-8")
        (data / "serve.json").chmod(0o600)
        daemon: DaemonProcess = start_daemon("--data-dir", str(data), "--workers", "1")
        assert read_daemon_file(data).pid == daemon.process.pid
        line = _only_line(_serve_refused(provider, data, workdir))
        assert f"(pid {daemon.process.pid}, {daemon.url})" in line
        assert daemon.stop() == 0
    finally:
        stranger.kill()
        stranger.wait()


def test_a_read_only_data_directory_still_starts_and_an_earlier_lock_still_guards_it(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path, tmp_path: Path
) -> None:
    """Read-only, no daemon can write ``serve.lock`` (nor ``serve.json``): a daemon starts
    all the same (without a store here: whether an empty read-only store starts is the
    store's question); the ``serve.lock`` an earlier one left is locked read-only."""
    token = {"TOOLPREP_TOKEN": "t" * 43}  # no serve.json to learn a generated one from
    with small_disk(tmp_path / "empty") as empty, small_disk(tmp_path / "used") as used:
        (empty.path / "toolprep").mkdir(mode=0o700)  # the data directory, with no store
        empty.read_only()
        home = {"XDG_DATA_HOME": str(empty.path), **token}
        unguarded = start_daemon("--no-persist", "--workers", "1", env_extra=home)
        assert "nothing keeps a second daemon off this data directory" in unguarded.stderr()
        assert unguarded.stop() == 0
        empty.writable()

        earlier = start_daemon("--data-dir", str(used.path), "--workers", "1")
        assert earlier.stop() == 0  # leaves serve.lock
        used.read_only()
        guarded = start_daemon("--data-dir", str(used.path), "--workers", "1", env_extra=token)
        line = _only_line(_serve_refused(provider, used.path, workdir, token))
        assert line.startswith(
            "toolprep: another toolprep serve (its pid unknown) already runs on the data "
            f"directory {used.path}"
        )
        assert guarded.stop() == 0
        used.writable()
