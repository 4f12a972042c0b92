"""``toolprep connect --start``: the daemon it starts belongs to nobody, listens on a port of
its own, and tells a later ``connect`` when it runs with other settings than that one asks for.

Each test runs real ``connect`` processes on stdio, the way an editor launches
its agent command, and the real daemon they start; every message the editor
reads is validated against the ACP schema. The started daemons are stopped at
the end (``stop_started_daemons``).
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.daemon.conftest import KIND
from tests.runtime import scenarios as sc
from tests.support.agent_process import AgentProcess, connect_command
from tests.support.daemon_process import daemon_environment, stop_started_daemons
from tests.support.eventually import eventually
from tests.support.processes import alive, ancestors, descendants, gone_within, kill_process_tree
from tests.support.runtime_harness import message_text, provider_base_url
from toolprep.runtime.daemon.discovery import read_daemon_file
from toolprep.runtime.hosting.model_routes import DEFAULT_MODELS
from toolprep.testing import FakeProviderServer

SETTINGS_DIFFER = "runs with other provider settings than this connect asks for"


class Editors:
    """``open(data, *serve_options)``: ``connect --data-dir DATA --start -- OPTIONS`` on
    pipes; every one is killed, and every daemon they started stopped, at the end."""

    def __init__(self, tmp_path: Path, workdir: Path, provider: FakeProviderServer) -> None:
        self._tmp, self.workdir, self._provider = tmp_path, workdir, provider
        self.opened: list[AgentProcess] = []
        self.data_dirs: set[Path] = set()

    def serve_options(self) -> list[str]:
        """A daemon on the loopback provider, without a --port: ``--start`` picks it."""
        base_url = provider_base_url(KIND, self._provider)
        return ["--workers", "1", "--max-retries", "0", "--provider", KIND, "--base-url", base_url]

    def open(
        self,
        data: Path,
        *serve_options: str,
        env_extra: dict[str, str] | None = None,
        start_new_session: bool = False,
        pass_fds: tuple[int, ...] = (),
    ) -> AgentProcess:
        self.data_dirs.add(data)
        editor = AgentProcess(
            connect_command("--data-dir", str(data), "--start", "--", *serve_options),
            daemon_environment(env_extra),
            self.workdir,
            self._tmp / f"connect-{len(self.opened)}.log",
            start_new_session=start_new_session,
            pass_fds=pass_fds,
        )
        self.opened.append(editor)
        return editor

    def close(self) -> None:
        for editor in self.opened:
            editor.kill()
        for data in self.data_dirs:
            stop_started_daemons(data)


@pytest.fixture
def editors(tmp_path: Path, workdir: Path, provider: FakeProviderServer) -> Iterator[Editors]:
    opened = Editors(tmp_path, workdir, provider)
    try:
        yield opened
    finally:
        opened.close()


def _prompt_through(editor: AgentProcess, provider: FakeProviderServer, cwd: Path) -> str:
    """A session and one answered prompt through ``editor``; the session id."""
    session_id = editor.start_session(cwd)
    provider.enqueue(sc.ok(sc.text_turn(KIND, "Still here.")))
    assert editor.result(editor.prompt(session_id))["stopReason"] == "end_turn"
    assert message_text(editor.updates(session_id)).endswith("Still here.")  # after a notice
    return session_id


def test_a_started_daemon_survives_the_editor_killing_the_whole_tree_of_connect(
    editors: Editors, provider: FakeProviderServer, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    handed, kept = os.pipe()  # a descriptor the editor hands its agent besides stdio
    try:
        first = editors.open(
            data, *editors.serve_options(), start_new_session=True, pass_fds=(kept,)
        )
        first.initialize()  # the daemon is up once connect answers
        daemon = read_daemon_file(data)
        assert first.process.pid not in ancestors(daemon.pid)
        assert os.getsid(daemon.pid) != os.getsid(first.process.pid)
        descriptors = {os.readlink(fd) for fd in Path(f"/proc/{daemon.pid}/fd").iterdir()}
        assert f"pipe:[{os.fstat(kept).st_ino}]" not in descriptors
    finally:
        os.close(handed)
        os.close(kept)

    hit = kill_process_tree(first.process.pid)
    first.wait_exit()
    assert daemon.pid not in hit
    assert alive(daemon.pid), "the daemon died with the connect that started it"

    second = editors.open(data, *editors.serve_options())
    _prompt_through(second, provider, editors.workdir)
    assert read_daemon_file(data).pid == daemon.pid  # joined it, did not start another
    assert second.stderr() == ""
    assert "exited with status" not in (data / "serve.log").read_text()


def test_two_data_directories_get_a_daemon_each(
    editors: Editors, provider: FakeProviderServer, tmp_path: Path
) -> None:
    started = [editors.open(tmp_path / name, *editors.serve_options()) for name in ("one", "two")]
    for editor in started:
        _prompt_through(editor, provider, editors.workdir)
    one, two = (read_daemon_file(tmp_path / name) for name in ("one", "two"))
    assert one.pid != two.pid and one.url != two.url
    for editor in started:
        editor.close_input()
        assert editor.wait_exit() == 0


def test_a_port_that_is_taken_is_named_with_who_holds_it(editors: Editors, tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        editor = editors.open(tmp_path / "data", *editors.serve_options(), "--port", str(port))
        assert editor.wait_exit() == 2
    said = editor.stderr()
    assert said.count("\n") == 1, said
    assert said.startswith("toolprep connect: --start: the started toolprep serve (pid ")
    assert (
        f"exited: toolprep: port {port} on 127.0.0.1 is already in use (held by pid "
        f"{os.getpid()} (" in said
    )
    assert "pass --port N for another port, or --port 0 for any free one" in said


def _notices(editor: AgentProcess, session_id: str) -> list[str]:
    return [
        update["content"]["text"]
        for update in editor.updates(session_id)
        if update["sessionUpdate"] == "agent_message_chunk"
        and SETTINGS_DIFFER in update["content"]["text"]
    ]


def test_a_connect_asking_for_other_settings_is_told_on_stderr_and_in_its_sessions(
    editors: Editors, provider: FakeProviderServer, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    options = editors.serve_options()
    first = editors.open(data, *options)  # starts it, with the key "test-key"
    _prompt_through(first, provider, editors.workdir)
    daemon = read_daemon_file(data)
    published = orjson.loads((data / "serve.json").read_bytes())["runs_with"]
    assert published["provider"] == KIND
    assert published["base_url"] == provider_base_url(KIND, provider)
    assert published["key_check"] and "test-key" not in (data / "serve.json").read_text()

    same = editors.open(data, *options)
    session_id = same.start_session(editors.workdir)
    assert same.stderr() == ""
    assert _notices(same, session_id) == []

    head = (
        f"toolprep connect: the toolprep serve already running for {data.resolve()} "
        f"(pid {daemon.pid}) {SETTINGS_DIFFER}: "
    )
    tail = (
        f". Connected to it all the same: to use them, stop that daemon (kill {daemon.pid}) "
        "and run `toolprep connect --start` with them again, or pass another --data-dir to "
        "start a daemon of their own; a daemon's key goes in the environment of the command "
        "that starts it\n"
    )
    asked = {
        "another key": (
            {"ANTHROPIC_API_KEY": "another-key"},
            options,
            "the ANTHROPIC_API_KEY of this environment (the daemon has another one)",
        ),
        "another provider": (
            {"OPENAI_API_KEY": "test-key"},
            ["--provider", "openai"],
            f"provider openai (the daemon runs {KIND})",
        ),
        "another model": (
            {},
            [*options, "--model", "claude-other"],
            f"model claude-other (the daemon runs {DEFAULT_MODELS[KIND]})",
        ),
    }
    for env_extra, serve_options, differs in asked.values():
        other = editors.open(data, *serve_options, env_extra=env_extra)
        session_id = _prompt_through(other, provider, editors.workdir)
        assert other.stderr() == head + differs + tail
        [notice] = _notices(other, session_id)
        assert differs in notice and f"kill {daemon.pid}" in notice
        assert read_daemon_file(data).pid == daemon.pid  # the one daemon served them all


def test_a_started_daemon_s_log_rotates_within_its_bound_and_keeps_what_it_writes_raw(
    editors: Editors, provider: FakeProviderServer, tmp_path: Path
) -> None:
    """The log keeper's bound, on a real daemon: tiny files, so that a stack dump (written
    to file descriptor 2 by a thread, not through ``logging``) rotates them several times."""
    data = tmp_path / "data"
    bound = 4096
    log_options = ["--log-level", "DEBUG", "--log-max-bytes", str(bound), "--log-backups", "2"]
    editor = editors.open(data, *editors.serve_options(), *log_options)
    _prompt_through(editor, provider, editors.workdir)
    daemon = read_daemon_file(data).pid
    keeper = [pid for pid in descendants(daemon) if str(data / "serve.log") in _words(pid)]
    assert len(keeper) == 1, "the log keeper runs beside the daemon"

    os.kill(daemon, signal.SIGUSR1)  # every thread's stack, on stderr
    eventually(lambda: "most recent call first" in _all_of(data))
    stop_started_daemons(data)  # SIGTERM, as a service manager stops it
    assert gone_within(keeper[0], 60), "the keeper ends once the daemon is gone"

    logs = sorted(path.name for path in data.glob("serve.log*"))
    assert logs == ["serve.log", "serve.log.1", "serve.log.2"]  # rotated, no more kept
    assert all((data / name).stat().st_size <= bound for name in logs)
    for name in logs:
        assert (data / name).read_bytes().endswith(b"\n")  # whole lines
    last = (data / "serve.log").read_text().splitlines()[-1]
    assert f" {daemon} INFO " in last and "stopped serving: " in last  # the newest line


def _words(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def _all_of(data: Path) -> str:
    """Every kept file of the log, oldest first."""
    files = sorted(data.glob("serve.log.*"), key=lambda path: -int(path.suffix[1:]))
    return "".join(path.read_text() for path in [*files, data / "serve.log"])
