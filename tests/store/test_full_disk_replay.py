"""A disk that fills in the middle of a turn: ``toolprep acp`` (its data directory and the
session's directory on one small disk) runs a turn whose second card fills the disk.

What the editor must get, while the disk is full, once space is back, and after a restart:
every card of a replay ends (its terminal update, or a gap mark after it that says why its
end is missing), a card shown completed live replays completed, and no SQLite text reaches
it (in a frame or an error).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runtime import scenarios as sc
from tests.support.agent_process import AgentProcess, agent_command
from tests.support.eventually import eventually
from tests.support.full_disk import (
    KIND,
    check_replay,
    fill_in_a_turn,
    is_gap,
    sqlite_text,
    unended,
)
from tests.support.message_log import Message
from tests.support.runtime_harness import lifecycle
from tests.support.small_disk import SmallDisk, small_disk
from toolprep.testing import FakeProviderServer


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    with small_disk(tmp_path / "disk", size="16m") as mounted:
        yield mounted


@pytest.fixture
def cwd(disk: SmallDisk) -> Path:
    """The session's directory, on the small disk, with a file to read."""
    path = disk.path / "work"
    path.mkdir()
    (path / "notes.txt").write_text("some notes\n")
    return path


def _agent(server: FakeProviderServer, data: Path, cwd: Path, workers: int = 1) -> AgentProcess:
    """``workers`` 1: the sessions in the agent's process; more: in worker processes, whose
    stores are not the one the agent replays from."""
    command, env = agent_command(
        KIND, server, "--allow-shell", "--data-dir", str(data), "--workers", str(workers)
    )
    agent = AgentProcess(command, env, cwd, cwd.parent / f"stderr-{os.urandom(4).hex()}.log")
    agent.initialize()
    return agent


def _replay(agent: AgentProcess, session_id: str, cwd: Path) -> list[Message]:
    before = len(agent.updates(session_id))
    loaded = agent.load(session_id, cwd)
    assert "result" in loaded, loaded
    return agent.updates(session_id)[before:]


@pytest.mark.parametrize("workers", [1, 2])
def test_cards_that_completed_while_the_disk_filled_replay_completed(
    disk: SmallDisk, cwd: Path, workers: int
) -> None:
    """While the disk is full a replay of the session marks what is not stored yet after the
    cards whose end it lacks; once space is back those frames are stored, and every card
    shown completed replays completed, also after a restart."""
    data = disk.path / "data"
    with FakeProviderServer() as server:
        agent = _agent(server, data, cwd, workers)
        try:
            session_id, live = fill_in_a_turn(server, agent, cwd)
            while_full = _replay(agent, session_id, cwd)
            assert not unended(while_full), lifecycle(while_full)
            [mark] = [u for u in while_full if is_gap(u)]
            assert "not saved yet: the session store cannot be written now" in str(mark)

            (cwd / "filler.bin").unlink()

            def stored_completed() -> bool:
                check_replay(_replay(agent, session_id, cwd), live)
                return True

            eventually(stored_completed, timeout=60, interval=1.0)
            agent.close_input()
            assert agent.wait_exit() == 0, agent.stderr()
        finally:
            agent.kill()
        again = _agent(server, data, cwd, workers)
        try:
            replayed = _replay(again, session_id, cwd)
            again.close_input()
            assert again.wait_exit() == 0, again.stderr()
        finally:
            again.kill()
    check_replay(replayed, live)
    assert not sqlite_text(agent.messages + again.messages)


def test_an_agent_that_stops_while_the_disk_is_full_leaves_no_card_open(
    disk: SmallDisk, cwd: Path
) -> None:
    """What the store still owed is lost with the agent: the next one's replay marks it as
    a gap after the cards it leaves without an end, and once it can write, it closes them
    as after a crash (their end was never stored)."""
    data = disk.path / "data"
    with FakeProviderServer() as server:
        agent = _agent(server, data, cwd)
        try:
            session_id, _ = fill_in_a_turn(server, agent, cwd)
            agent.close_input()
            assert agent.wait_exit() == 0, agent.stderr()
        finally:
            agent.kill()
        again = _agent(server, data, cwd)
        try:
            at_start = _replay(again, session_id, cwd)
            (cwd / "filler.bin").unlink()
            server.enqueue(sc.ok(sc.text_turn(KIND, "Space again.")))

            def taken() -> bool:
                reply = again.reply(again.prompt(session_id, "again"), timeout=60)
                assert "result" in reply, reply
                return True

            eventually(taken, timeout=60, interval=1.0)
            after = _replay(again, session_id, cwd)
            again.close_input()
            assert again.wait_exit() == 0, again.stderr()
        finally:
            again.kill()
    for replayed in (at_start, after):
        assert not unended(replayed), lifecycle(replayed)
        assert any(is_gap(update) for update in replayed)
    assert lifecycle(after)["call_read"][-1] == "completed"  # stored before the disk filled
    assert not sqlite_text(agent.messages + again.messages)
