"""``toolprep acp --data-dir``: one numbered frame log per session, and what it promises.

Every ``session/update`` carries its number in the session's log
(``_meta.toolprep.seq``); ``session/load`` with ``_meta.toolprep.afterSeq`` replays only
what came after. A store another process locks past its busy timeout costs no frame
silently: the turn says what was not saved, and it is written once the lock is gone. And
killed at any point, the agent never leaves a file on disk whose card says it was not run,
nor turns a card the client saw completed into anything else.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.runtime import scenarios as sc
from tests.support.acp_schema import validate_update
from tests.support.agent_process import AgentProcess, agent_command
from tests.support.message_log import Message
from tests.support.runtime_harness import check_cards, is_discarded, lifecycle, message_text
from tests.support.sqlite_lock import write_locked
from toolprep.messages import frames as fr
from toolprep.testing import FakeProviderServer

KIND = "anthropic"
INVALID_PARAMS = -32602


def _agent(server: FakeProviderServer, data_dir: Path, cwd: Path) -> AgentProcess:
    command, env = agent_command(
        KIND, server, "--allow-shell", "--data-dir", str(data_dir), "--workers", "1"
    )
    return AgentProcess(command, env, cwd, cwd / f"stderr-{os.urandom(4).hex()}.log")


@contextlib.contextmanager
def running(server: FakeProviderServer, data_dir: Path, cwd: Path) -> Iterator[AgentProcess]:
    agent = _agent(server, data_dir, cwd)
    try:
        agent.reply(agent.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}}))
        yield agent
    finally:
        agent.kill()


def _load(agent: AgentProcess, session_id: str, cwd: Path, **meta: Any) -> Message:
    params: dict[str, Any] = {"sessionId": session_id, "cwd": str(cwd), "mcpServers": []}
    if meta:
        params["_meta"] = {"toolprep": meta}
    return agent.reply(agent.request("session/load", params), timeout=60)


def test_a_load_resumes_after_the_last_frame_the_client_saw(tmp_path: Path) -> None:
    data_dir, cwd = tmp_path / "data", tmp_path / "work"
    cwd.mkdir()
    with FakeProviderServer() as server:
        server.enqueue(
            sc.ok(sc.calls_turn(KIND, [sc.shell("echo one > one.txt", "call_1")])),
            sc.ok(sc.text_turn(KIND, "Wrote one.")),
            sc.ok(sc.text_turn(KIND, "Second answer.")),
        )
        with running(server, data_dir, cwd) as first:
            session_id = first.start_session(cwd)
            for question in ("first", "second"):
                reply = first.reply(first.prompt(session_id, question), timeout=60)
                assert reply["result"]["stopReason"] == "end_turn"
            sent = first.updates(session_id)
            first.close_input()
            assert first.wait_exit() == 0
        with running(server, data_dir, cwd) as second:
            assert "result" in _load(second, session_id, cwd)
            replayed = second.updates(session_id)
            # A client that saw the first turn asks for what came after it only.
            [second_question] = [
                u
                for u in replayed
                if u["sessionUpdate"] == "user_message_chunk" and u["content"]["text"] == "second"
            ]
            seen = fr.seq_of(second_question)
            assert seen is not None
            assert "result" in _load(second, session_id, cwd, afterSeq=seen - 1)
            resumed = second.updates(session_id)[len(replayed) :]
            refused = _load(second, session_id, cwd, afterSeq="7")
            second.close_input()
            assert second.wait_exit() == 0
    # Every frame carries its number, in order from 1; the client that prompted was shown
    # all but its own prompts' (it showed those itself).
    assert [fr.seq_of(u) for u in replayed] == list(range(1, len(replayed) + 1))
    assert [u for u in replayed if u["sessionUpdate"] != "user_message_chunk"] == sent
    assert resumed == replayed[seen - 1 :]
    assert resumed[0] == second_question
    assert refused["error"]["code"] == INVALID_PARAMS
    assert "'_meta.toolprep.afterSeq' must be a frame number" in refused["error"]["message"]


def test_a_store_locked_past_its_busy_timeout_loses_no_frame_silently(tmp_path: Path) -> None:
    """While another process holds the write lock for longer than the store waits, a turn
    runs: its shell call does not run (its start could not be saved), the turn says the
    session could not be saved, and the frames it could not store are stored once the lock
    is gone, so a later load shows every frame shown."""
    data_dir, cwd = tmp_path / "data", tmp_path / "work"
    cwd.mkdir()
    with FakeProviderServer() as server:
        server.enqueue(
            sc.ok(sc.calls_turn(KIND, [sc.shell("echo x > locked.txt", "call_locked")])),
            sc.ok(sc.text_turn(KIND, "Could not write.")),
            sc.ok(sc.text_turn(KIND, "Saved again.")),
        )
        with running(server, data_dir, cwd) as first:
            session_id = first.start_session(cwd)
            with write_locked(data_dir / "sessions.db"):
                reply = first.reply(first.prompt(session_id, "during the lock"), timeout=120)
                assert reply["result"]["stopReason"] == "end_turn"
                stalled = first.updates(session_id)
            reply = first.reply(first.prompt(session_id, "after the lock"), timeout=60)
            assert reply["result"]["stopReason"] == "end_turn"
            sent = first.updates(session_id)
            first.close_input()
            assert first.wait_exit() == 0
        with running(server, data_dir, cwd) as second:
            assert "result" in _load(second, session_id, cwd)
            replayed = second.updates(session_id)
            second.close_input()
            assert second.wait_exit() == 0
    assert not (cwd / "locked.txt").exists()
    text = message_text(stalled)
    assert "[the session could not be saved: database is locked (" in text
    ends = [u for u in stalled if u.get("toolCallId") == "call_locked" and u["status"] == "failed"]
    assert "its start could not be saved (database is locked)" in str(ends[-1]["content"])
    # The frames the lock refused were kept and written once it was gone: every frame shown
    # replays as it was, with no gap.
    assert not [u for u in replayed if "gap" in u.get("_meta", {}).get("toolprep", {})]
    stored = {fr.seq_of(u): u for u in replayed if fr.seq_of(u) is not None}
    for update in sent:
        seq = fr.seq_of(update)
        assert seq is not None
        assert stored.get(seq) == update


LOCKED_TURN_REPLY_S = 90.0
"""A generous bound for a turn of ``LOCKED_CARDS`` cards under a foreign lock: one busy
timeout (5 s) and the turn's own work. Waiting out the timeout once per write, as the store
did, took more than 200 s for them."""

LOCKED_CARDS = 30


def test_a_foreign_write_lock_costs_a_turn_of_many_cards_one_busy_timeout(
    tmp_path: Path,
) -> None:
    """A backup or a ``sqlite3`` shell holding the write lock: the first write waits out the
    busy timeout and turns the store read-only, the writes after it fail at once, so the turn
    ends (no card run, the loss said) and new turns are refused with -32004 until the lock is
    gone; then the store is written again."""
    data_dir, cwd = tmp_path / "data", tmp_path / "work"
    cwd.mkdir()
    calls = [sc.shell(f"echo {n} > f{n}.txt", f"call_{n}") for n in range(LOCKED_CARDS)]
    with FakeProviderServer() as server:
        server.enqueue(
            sc.ok(sc.calls_turn(KIND, calls)),
            sc.ok(sc.text_turn(KIND, "None of them ran.")),
            sc.ok(sc.text_turn(KIND, "Saved again.")),
        )
        with running(server, data_dir, cwd) as agent:
            session_id = agent.start_session(cwd)
            with write_locked(data_dir / "sessions.db"):
                prompt = agent.prompt(session_id, "during the lock")
                reply = agent.reply(prompt, timeout=LOCKED_TURN_REPLY_S)
                assert reply["result"]["stopReason"] == "end_turn"
                refused = agent.reply(agent.prompt(session_id, "still locked"), timeout=60)
                assert refused["error"]["code"] == -32004, refused
                assert "database is locked" in refused["error"]["message"]
            stalled = agent.updates(session_id)
            again = agent.reply(agent.prompt(session_id, "after the lock"), timeout=60)
            assert again["result"]["stopReason"] == "end_turn"
            agent.close_input()
            assert agent.wait_exit() == 0
    assert not list(cwd.glob("f*.txt"))
    ends = lifecycle(stalled)
    assert all(ends[f"call_{n}"][-1] == "failed" for n in range(LOCKED_CARDS)), ends
    assert "[the session could not be saved: database is locked (" in message_text(stalled)


def test_a_session_is_loaded_under_a_foreign_write_lock_and_its_turns_wait_for_the_lock(
    tmp_path: Path,
) -> None:
    """Loading claims the session, a write: under another process's lock the claim turns the
    store read-only and the session is loaded unclaimed, replayed whole, as a read-only store
    loads it; a prompt is refused with -32004 until the lock is gone."""
    data_dir, cwd = tmp_path / "data", tmp_path / "work"
    cwd.mkdir()
    with FakeProviderServer() as server:
        server.enqueue(
            sc.ok(sc.text_turn(KIND, "Stored before the lock.")),
            sc.ok(sc.text_turn(KIND, "Answered after the lock.")),
        )
        with running(server, data_dir, cwd) as first:
            session_id = first.start_session(cwd)
            assert first.result(first.prompt(session_id))["stopReason"] == "end_turn"
            first.close_input()
            assert first.wait_exit() == 0
        with running(server, data_dir, cwd) as second:
            with write_locked(data_dir / "sessions.db"):
                assert "result" in _load(second, session_id, cwd)
                assert message_text(second.updates(session_id)) == "Stored before the lock."
                refused = second.reply(second.prompt(session_id), timeout=60)
                assert refused["error"]["code"] == -32004, refused
            again = second.reply(second.prompt(session_id), timeout=60)
            assert again["result"]["stopReason"] == "end_turn", again
            second.close_input()
            assert second.wait_exit() == 0


def _gaps(updates: list[Message]) -> list[Message]:
    return [u for u in updates if "gap" in u.get("_meta", {}).get("toolprep", {})]


def test_a_restart_after_a_kill_numbers_on_past_every_frame_shown(tmp_path: Path) -> None:
    """Killed (SIGKILL) while its answer streams after its last card, the agent had shown
    text it never stored. The next agent numbers on past every number shown: a client
    resuming after the last frame it saw gets every later frame, and a gap mark says
    (as a bound) what the log lacks."""
    data_dir, cwd = tmp_path / "data", tmp_path / "work"
    cwd.mkdir()
    text = "An answer the agent is killed while streaming."
    with FakeProviderServer() as server:
        server.enqueue(
            sc.ok(sc.calls_turn(KIND, [sc.shell("echo one", "call_1")])),
            sc.text_then_stall(KIND, text),
        )
        with running(server, data_dir, cwd) as first:
            session_id = first.start_session(cwd)
            shown = first.prompt_until_shown(session_id, text)
            os.kill(first.process.pid, signal.SIGKILL)
            first.wait_exit()
    numbers = [fr.seq_of(u) for u in shown]
    assert None not in numbers
    seen = max(n for n in numbers if n is not None)
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.text_turn(KIND, "After the restart.")))
        with running(server, data_dir, cwd) as second:
            assert "result" in _load(second, session_id, cwd, afterSeq=seen)
            reply = second.reply(second.prompt(session_id, "again"), timeout=60)
            assert reply["result"]["stopReason"] == "end_turn"
            later = second.updates(session_id)
            assert "result" in _load(second, session_id, cwd, afterSeq=seen)
            resumed = second.updates(session_id)[len(later) :]
            second.close_input()
            assert second.wait_exit() == 0
    for update in resumed:
        validate_update(update, session_id)
    # Every number the second agent gave is past every number the first one showed, and a
    # client resuming after the last of those gets all it sent (none skipped).
    assert all((fr.seq_of(u) or 0) > seen for u in later)
    assert "After the restart." in message_text(later)
    assert [u for u in resumed if u["sessionUpdate"] != "user_message_chunk"] == later
    # The text after the card was shown and never stored: the mark covers it, as a bound.
    [mark] = _gaps(resumed)
    gap = mark["_meta"]["toolprep"]["gap"]
    assert gap["upTo"] is True and gap["cause"] == "stopped"
    lost = [u for u in shown if u["sessionUpdate"] == "agent_message_chunk"]
    assert lost and gap["afterSeq"] < min(fr.seq_of(u) or 0 for u in lost)
    assert gap["afterSeq"] + gap["missing"] >= seen
    assert mark["content"]["text"] == (
        f"\n[up to {gap['missing']} updates were not saved here: the agent stopped before "
        "they were stored]\n"
    )


# --- killed at random points ---------------------------------------------------------------

ROUNDS = 10
CALLS_PER_TURN = 3


def _round_calls(round_no: int) -> list[sc.Call]:
    return [
        sc.shell(f"echo {round_no} > f_{round_no}_{n}.txt; sleep 0.1", f"call_{round_no}_{n}")
        for n in range(CALLS_PER_TURN)
    ]


def _last_states(updates: list[Message]) -> dict[str, Message]:
    """Each card's last frame."""
    last: dict[str, Message] = {}
    for update in updates:
        if update.get("sessionUpdate") in ("tool_call", "tool_call_update"):
            last[str(update["toolCallId"])] = update
    return last


def test_killed_at_random_points_no_file_is_not_run_and_no_completed_card_changes(
    tmp_path: Path,
) -> None:
    """Many turns of file-writing calls, the agent killed (SIGKILL) at a random point of
    each; after each restart the loaded session never pairs a file on disk with a "not
    run" card, and every card a client saw completed replays completed."""
    rng = random.Random(20261205)
    data_dir, cwd = tmp_path / "data", tmp_path / "work"
    cwd.mkdir()
    session_id: str | None = None
    seen_completed: set[str] = set()
    for round_no in range(ROUNDS):
        with FakeProviderServer() as server:
            server.enqueue(
                sc.ok(sc.calls_turn(KIND, _round_calls(round_no))),
                sc.ok(sc.text_turn(KIND, f"Round {round_no} done.")),
            )
            with running(server, data_dir, cwd) as agent:
                if session_id is None:
                    answer = agent.request("session/new", {"cwd": str(cwd), "mcpServers": []})
                    session_id = agent.reply(answer)["result"]["sessionId"]
                else:
                    assert "result" in _load(agent, session_id, cwd)
                    _check_replay(agent.updates(session_id), cwd, seen_completed)
                _kill_after(agent, session_id, rng.randint(1, 4 * CALLS_PER_TURN + 2), round_no)
                seen_completed |= {
                    call_id
                    for call_id, last in _last_states(agent.updates(session_id)).items()
                    if last.get("status") == "completed"
                }
                os.kill(agent.process.pid, signal.SIGKILL)
                agent.wait_exit()
    assert session_id is not None
    with FakeProviderServer() as server, running(server, data_dir, cwd) as agent:
        assert "result" in _load(agent, session_id, cwd)
        replayed = agent.updates(session_id)
        agent.close_input()
        assert agent.wait_exit() == 0
    cards = _check_replay(replayed, cwd, seen_completed)
    assert seen_completed, "no call completed before a kill: the rounds tested nothing"
    assert any(f.startswith("f_") for f in os.listdir(cwd))
    assert len(cards) >= CALLS_PER_TURN  # the first round's calls at least


def _kill_after(agent: AgentProcess, session_id: str, frames: int, round_no: int) -> None:
    """Prompt, and return once the turn sent ``frames`` frames or was answered: a random
    point for the caller's kill."""
    before = len(agent.updates(session_id))
    prompt = agent.prompt(session_id, f"round {round_no}")
    agent.wait_for(
        lambda ms: (
            len(agent.updates(session_id)) - before >= frames
            or any(m.get("id") == prompt for m in ms)
        ),
        timeout=60,
    )


def _check_replay(replayed: list[Message], cwd: Path, seen_completed: set[str]) -> set[str]:
    """The properties of a replay; returns the cards in it."""
    check_cards(replayed)
    last = _last_states(replayed)
    for call_id, end in last.items():
        _, round_no, n = call_id.split("_")
        if (cwd / f"f_{round_no}_{n}.txt").exists() and is_discarded(end):
            assert end["_meta"]["discardReason"] == "interrupted", (call_id, end)
            assert "it may have run" in end["title"]
    for call_id in seen_completed:
        assert last[call_id]["status"] == "completed", (call_id, lifecycle(replayed)[call_id])
    return set(last)
