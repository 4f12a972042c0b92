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

import orjson
import pytest

from tests.runtime import scenarios as sc
from tests.support.agent_process import AgentProcess, agent_command
from tests.support.eventually import eventually
from tests.support.message_log import Message
from tests.support.runtime_harness import lifecycle, message_text
from tests.support.small_disk import SmallDisk, small_disk
from toolprep.messages import frames as fr
from toolprep.testing import FakeProviderServer

KIND = "anthropic"

SQLITE_TEXT = (
    "database or disk is full",
    "disk I/O error",
    "cannot rollback",
    "no transaction is active",
    "readonly database",
    "unable to open database",
    "sqlite",
)
"""What SQLite says, which must never reach a client: the store says why in its own words."""

FILLING = [
    ("call_read", "read_file", {"path": "notes.txt"}),
    # The disk fills under the second card: its end is the first write refused.
    sc.shell("cat /dev/zero > filler.bin 2>/dev/null; echo filled", "call_fill"),
    ("call_after", "read_file", {"path": "notes.txt"}),
    # Its start cannot be stored, so it does not run.
    sc.shell("echo never > never.txt", "call_never"),
]


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    with small_disk(tmp_path / "disk", size="16m") as mounted:
        yield mounted


def _agent(server: FakeProviderServer, data: Path, cwd: Path) -> AgentProcess:
    command, env = agent_command(
        KIND, server, "--allow-shell", "--data-dir", str(data), "--workers", "1"
    )
    agent = AgentProcess(command, env, cwd, cwd.parent / f"stderr-{os.urandom(4).hex()}.log")
    agent.initialize()
    return agent


def _replay(agent: AgentProcess, session_id: str, cwd: Path) -> list[Message]:
    before = len(agent.updates(session_id))
    loaded = agent.load(session_id, cwd)
    assert "result" in loaded, loaded
    return agent.updates(session_id)[before:]


def _is_gap(update: Message) -> bool:
    return fr.gap_of(update) is not None


def _unended(replayed: list[Message]) -> list[str]:
    """The cards of ``replayed`` that neither end nor are followed by a gap mark."""
    last_frame: dict[str, int] = {}
    ends = lifecycle(replayed)
    for n, update in enumerate(replayed):
        call_id = update.get("toolCallId")
        if isinstance(call_id, str):
            last_frame[call_id] = n
    marks = [n for n, update in enumerate(replayed) if _is_gap(update)]
    return [
        call_id
        for call_id, n in last_frame.items()
        if ends[call_id][-1] not in ("completed", "failed", "discarded")
        and not any(mark > n for mark in marks)
    ]


def _sqlite_text(messages: list[Message]) -> list[str]:
    text = orjson.dumps(messages).decode().lower()
    return [said for said in SQLITE_TEXT if said.lower() in text]


def _fill_in_a_turn(
    server: FakeProviderServer, agent: AgentProcess, cwd: Path
) -> tuple[str, list[Message]]:
    """A session whose first turn stores fine and whose second fills the disk; its id and
    what the second showed live."""
    server.enqueue(
        sc.ok(sc.calls_turn(KIND, [("call_first", "read_file", {"path": "notes.txt"})])),
        sc.ok(sc.text_turn(KIND, "Read it.")),
        sc.ok(sc.calls_turn(KIND, FILLING)),
        sc.ok(sc.text_turn(KIND, "The disk is full now.")),
    )
    session_id = agent.new_session(cwd)
    assert agent.result(agent.prompt(session_id, "read"), timeout=60)["stopReason"] == "end_turn"
    before = len(agent.updates(session_id))
    reply = agent.reply(agent.prompt(session_id, "fill the disk"), timeout=120)
    assert reply["result"]["stopReason"] == "end_turn", reply
    live = agent.updates(session_id)[before:]
    ends = lifecycle(live)
    # The scene as staged: cards that completed live after the disk filled, one not run.
    assert ends["call_fill"][-1] == "completed", ends
    assert ends["call_after"][-1] == "completed", ends
    assert ends["call_never"][-1] == "failed", ends
    assert not (cwd / "never.txt").exists()
    assert "could not be saved" in message_text(live), message_text(live)
    return session_id, live


def _completed_live(live: list[Message]) -> list[str]:
    return [call_id for call_id, seen in lifecycle(live).items() if seen[-1] == "completed"]


def _check(replayed: list[Message], live: list[Message]) -> None:
    assert not _unended(replayed), lifecycle(replayed)
    ends = lifecycle(replayed)
    for call_id in _completed_live(live):
        assert ends.get(call_id, ["-"])[-1] == "completed", (call_id, ends)


def test_cards_that_completed_while_the_disk_filled_replay_completed(
    disk: SmallDisk, tmp_path: Path
) -> None:
    """While the disk is full a replay of the session marks what is not stored yet after the
    cards whose end it lacks; once space is back those frames are stored, and every card
    shown completed replays completed, also after a restart."""
    data, cwd = disk.path / "data", disk.path / "work"
    cwd.mkdir()
    (cwd / "notes.txt").write_text("some notes\n")
    with FakeProviderServer() as server:
        agent = _agent(server, data, cwd)
        try:
            session_id, live = _fill_in_a_turn(server, agent, cwd)
            while_full = _replay(agent, session_id, cwd)
            assert not _unended(while_full), lifecycle(while_full)
            [mark] = [u for u in while_full if _is_gap(u)]
            assert "not saved yet: the session store cannot be written now" in str(mark)

            (cwd / "filler.bin").unlink()

            def stored_completed() -> bool:
                _check(_replay(agent, session_id, cwd), live)
                return True

            eventually(stored_completed, timeout=60, interval=1.0)
            seen = list(agent.messages)
            agent.close_input()
            assert agent.wait_exit() == 0, agent.stderr()
        finally:
            agent.kill()
        again = _agent(server, data, cwd)
        try:
            replayed = _replay(again, session_id, cwd)
            again.close_input()
            assert again.wait_exit() == 0, again.stderr()
        finally:
            again.kill()
    _check(replayed, live)
    assert not _sqlite_text(seen + again.messages), _sqlite_text(seen + again.messages)


def test_an_agent_that_stops_while_the_disk_is_full_leaves_no_card_open(
    disk: SmallDisk, tmp_path: Path
) -> None:
    """What the store still owed is lost with the agent: the next one's replay marks it as
    a gap after the cards it leaves without an end, and once it can write, it closes them
    as after a crash (their end was never stored)."""
    data, cwd = disk.path / "data", disk.path / "work"
    cwd.mkdir()
    (cwd / "notes.txt").write_text("some notes\n")
    with FakeProviderServer() as server:
        agent = _agent(server, data, cwd)
        try:
            session_id, _ = _fill_in_a_turn(server, agent, cwd)
            agent.close_input()
            assert agent.wait_exit() == 0, agent.stderr()
        finally:
            agent.kill()
        again = _agent(server, data, cwd)
        try:
            while_full = _replay(again, session_id, cwd)
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
    for replayed in (while_full, after):
        assert not _unended(replayed), lifecycle(replayed)
        assert any(_is_gap(update) for update in replayed)
    assert lifecycle(after)["call_read"][-1] == "completed"  # stored before the disk filled
    assert not _sqlite_text(agent.messages + again.messages)
