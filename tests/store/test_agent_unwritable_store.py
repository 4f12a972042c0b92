"""``toolprep acp`` whose data directory is on a full or read-only disk starts, lists and
loads its sessions, refuses new sessions and turns by cause, and takes them once the
disk takes writes again (writing the crash discards it owed); so does one whose data
directory is empty, with no store to read until it can create one."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.agent_process import AgentProcess, agent_command
from tests.support.degraded_store import (
    crashed_session,
    degrade_and_recover,
    discarded_after_recovery,
    empty_and_recover,
    locked_and_recover,
)
from tests.support.eventually import eventually
from tests.support.small_disk import SmallDisk, Unwritable, small_disk
from toolprep.testing import FakeProviderServer

KIND = "anthropic"


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    with small_disk(tmp_path / "data") as mounted:
        yield mounted


@pytest.mark.parametrize(("condition", "workers"), [("full", 1), ("read_only", 1), ("full", 2)])
def test_an_agent_on_an_unwritable_disk_serves_what_is_stored_and_recovers(
    disk: SmallDisk, tmp_path: Path, condition: Unwritable, workers: int
) -> None:
    cwd = tmp_path / "work"
    cwd.mkdir()
    db = disk.path / "sessions.db"
    crashed_session(db, cwd)
    clear = disk.refuse_writes(condition)
    with FakeProviderServer() as provider:
        command, env = agent_command(
            KIND, provider, "--data-dir", str(disk.path), "--workers", str(workers)
        )
        agent = AgentProcess(command, env, cwd, tmp_path / f"stderr-{os.urandom(4).hex()}.log")
        try:
            agent.reply(
                agent.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            )
            cause = degrade_and_recover(agent, cwd, provider, clear, KIND)
            # Written on recovery: at once by the store that took the new session, within
            # a probe interval by a front that only lists and loads (with workers).

            def discarded() -> bool:
                assert discarded_after_recovery(db) == ["preparing", "discarded"], agent.stderr()
                return True

            eventually(discarded, timeout=60, interval=0.2)
            agent.close_input()
            assert agent.wait_exit() == 0
        finally:
            agent.kill()
    # In the store's words, never SQLite's.
    read_only = {
        "the database file cannot be opened for writing",
        "the database file cannot be written",
    }
    expected = {"the disk is full"} if condition == "full" else read_only
    assert cause in expected | {"the disk failed a read or a write"}, cause
    assert "cannot be written" in agent.stderr()
    assert "can be written again" in agent.stderr()


@pytest.mark.parametrize("workers", [1, 2])
def test_an_agent_on_an_empty_read_only_data_directory_starts_and_recovers(
    disk: SmallDisk, tmp_path: Path, workers: int
) -> None:
    cwd = tmp_path / "work"
    cwd.mkdir()
    disk.read_only()
    with FakeProviderServer() as provider:
        command, env = agent_command(
            KIND, provider, "--data-dir", str(disk.path), "--workers", str(workers)
        )
        agent = AgentProcess(command, env, cwd, tmp_path / "stderr.log")
        try:
            agent.initialize()
            cause = empty_and_recover(agent, cwd, provider, disk.writable, KIND)
            agent.close_input()
            assert agent.wait_exit() == 0
        finally:
            agent.kill()
    assert cause == "Read-only file system", cause
    assert "cannot be written (Read-only file system)" in agent.stderr()
    assert "can be written again" in agent.stderr()
    assert (disk.path / "sessions.db").exists()


@pytest.mark.parametrize("workers", [1, 2])
def test_an_agent_whose_store_another_process_locks_lists_and_refuses_new_sessions(
    tmp_path: Path, workers: int
) -> None:
    cwd = tmp_path / "work"
    cwd.mkdir()
    data = tmp_path / "data"
    with FakeProviderServer() as provider:
        command, env = agent_command(
            KIND, provider, "--data-dir", str(data), "--workers", str(workers)
        )
        agent = AgentProcess(command, env, cwd, tmp_path / "stderr.log")
        try:
            agent.initialize()
            agent.new_session(cwd)
            cause = locked_and_recover(agent, cwd, data / "sessions.db", provider, KIND)
            agent.close_input()
            assert agent.wait_exit() == 0
        finally:
            agent.kill()
    assert cause == "database is locked", cause
