"""``toolprep acp --data-dir``: the transcripts it keeps are readable by their user alone.

The agent runs under the usual umask (022), which would leave a new directory 0755 and
SQLite's files 0644: every other local user could read the files the tools read, the
commands and their output. These tests start the real agent on a fresh data directory and
on one an older version left world-readable, and look at the modes on disk.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tests.runtime import scenarios as sc
from tests.support.agent_process import AgentProcess, agent_command
from toolprep.runtime.store import SessionStore
from toolprep.testing import FakeProviderServer

KIND = "anthropic"


def _agent_under_umask_022(server: FakeProviderServer, data_dir: Path, cwd: Path) -> AgentProcess:
    command, env = agent_command(KIND, server, "--data-dir", str(data_dir))
    # The umask most users have: the agent must not rely on a stricter one.
    wrapped = ["sh", "-c", 'umask 022 && exec "$@"', "sh", *command]
    return AgentProcess(wrapped, env, cwd, cwd / f"stderr-{os.urandom(4).hex()}.log")


def _modes_below(directory: Path) -> dict[str, int]:
    """Every entry under ``directory`` (itself as ``.``) and its permission bits."""
    modes = {".": stat.S_IMODE(directory.lstat().st_mode)}
    for path in directory.rglob("*"):
        modes[str(path.relative_to(directory))] = stat.S_IMODE(path.lstat().st_mode)
    return modes


def _readable_by_others(modes: dict[str, int]) -> dict[str, str]:
    return {name: f"{mode:04o}" for name, mode in modes.items() if mode & 0o077}


def test_a_new_data_dir_and_the_store_with_its_write_ahead_log_are_private(
    tmp_path: Path,
) -> None:
    data_dir, cwd = tmp_path / "data", tmp_path / "work"
    cwd.mkdir()
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.text_turn(KIND, "Hello.")))
        agent = _agent_under_umask_022(server, data_dir, cwd)
        try:
            session_id = agent.start_session(cwd)
            reply = agent.reply(agent.prompt(session_id, "hi"))
            assert reply["result"]["stopReason"] == "end_turn"
            # While the agent runs, the write-ahead log and its index are on disk too.
            running = _modes_below(data_dir)
            assert {"sessions.db", "sessions.db-wal", "sessions.db-shm"} <= running.keys()
            assert _readable_by_others(running) == {}
            assert running["."] == 0o700
            assert running["sessions.db"] == 0o600
            agent.close_input()
            assert agent.wait_exit() == 0
        finally:
            agent.kill()
    assert _readable_by_others(_modes_below(data_dir)) == {}


def test_a_data_dir_an_older_version_left_readable_is_narrowed_on_start_and_logged(
    tmp_path: Path,
) -> None:
    data_dir, cwd, outside = tmp_path / "data", tmp_path / "work", tmp_path / "outside.txt"
    cwd.mkdir()
    SessionStore(data_dir / "sessions.db").close()
    (data_dir / "serve.log").write_text("an old daemon's log\n")
    (data_dir / "old").mkdir()
    (data_dir / "old" / "notes.txt").write_text("kept\n")
    outside.write_text("not the agent's\n")
    (data_dir / "link-out").symlink_to(outside)  # a link is never followed to its target
    for path in (data_dir, data_dir / "old"):
        path.chmod(0o755)
    for path in (data_dir / "sessions.db", data_dir / "serve.log", data_dir / "old" / "notes.txt"):
        path.chmod(0o644)
    outside.chmod(0o644)

    with FakeProviderServer() as server:
        agent = _agent_under_umask_022(server, data_dir, cwd)
        try:
            agent.start_session(cwd)
            modes = _modes_below(data_dir)
            assert _readable_by_others({k: v for k, v in modes.items() if k != "link-out"}) == {}
            assert modes["."] == 0o700
            assert modes["old"] == 0o700
            assert modes["sessions.db"] == modes["serve.log"] == modes["old/notes.txt"] == 0o600
            assert stat.S_IMODE(outside.stat().st_mode) == 0o644
            log = agent.stderr()
            assert f"the data directory {data_dir} was readable by other users" in log
            assert "sessions.db 0644 -> 0600" in log
            assert "serve.log 0644 -> 0600" in log
            agent.close_input()
            assert agent.wait_exit() == 0
        finally:
            agent.kill()

    # Once narrowed, the next start has nothing to say.
    with FakeProviderServer() as server:
        agent = _agent_under_umask_022(server, data_dir, cwd)
        try:
            agent.start_session(cwd)
            agent.close_input()
            assert agent.wait_exit() == 0
            assert "was readable by other users" not in agent.stderr()
        finally:
            agent.kill()
