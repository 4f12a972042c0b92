"""A hostile ``search`` over real stdio: the agent keeps serving other sessions and cancels.

The loopback provider scripts session A's model to call ``search`` with a
nested-quantifier pattern over a tree holding a long run of ``a`` followed by
``!`` (which a backtracking engine never finishes) and a few hundred megabytes
of short lines (so the search itself runs for seconds). While it runs,
session B's ordinary prompt must be answered, and a cancel of A's turn must
end it. With a backtracking engine the first file alone stalls the process.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from acp import text_block

from tests.runtime import scenarios as sc
from tests.support.agent_process import (
    RecordingClient,
    SharedSdkAgents,
)
from tests.support.runtime_harness import check_cards, lifecycle

KIND = "anthropic"

pytestmark = pytest.mark.timeout(120)


def _hostile_tree(root: Path) -> None:
    (root / "a_long.txt").write_text("a" * 50_000 + "!\n")
    bulk = root / "bulk.txt"
    bulk.write_bytes(b"a!\n" * 2_000_000)
    for i in range(40):  # hard links: many files to search, one file's worth of disk
        os.link(bulk, root / f"copy{i:02d}.txt")


def _states(client: RecordingClient, session_id: str, call_id: str) -> list[str]:
    return lifecycle(client.frames(session_id)).get(call_id, [])


@pytest.mark.asyncio(loop_scope="module")
async def test_hostile_search_leaves_other_sessions_served_and_is_cancellable(
    tmp_path: Path,
    shared_sdk_agents: SharedSdkAgents,
) -> None:
    _hostile_tree(tmp_path)
    # (?-m) keeps the search on its line-by-line path, so over this tree it runs for
    # seconds (up to its 20s time budget) and is still running when B has finished.
    hostile = ("call_hostile", "search", {"pattern": r"(?-m)\A(a+)+$"})
    client = RecordingClient()
    conn, server = await shared_sdk_agents.agent(KIND, client)
    server.enqueue(
        sc.ok(sc.calls_turn(KIND, [hostile])),
        sc.ok(sc.text_turn(KIND, "B answered.")),
        sc.ok(sc.text_turn(KIND, "A answered again.")),
    )
    one = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
    two = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
    turn_a = asyncio.create_task(
        conn.prompt(session_id=one.session_id, prompt=[text_block("search")])
    )
    await client.wait_for(
        lambda _: "in_progress" in _states(client, one.session_id, "call_hostile")
    )
    reply_b = await asyncio.wait_for(
        conn.prompt(session_id=two.session_id, prompt=[text_block("hello")]), 30
    )
    assert reply_b.stop_reason == "end_turn"
    # B was served while A's search was still running, not after it.
    assert _states(client, one.session_id, "call_hostile")[-1] == "in_progress"

    await conn.cancel(session_id=one.session_id)
    reply_a = await asyncio.wait_for(turn_a, 15)
    assert reply_a.stop_reason == "cancelled"

    again = await asyncio.wait_for(
        conn.prompt(session_id=one.session_id, prompt=[text_block("still there?")]), 30
    )
    assert again.stop_reason == "end_turn"
    texts = "".join(
        f["content"]["text"]
        for f in client.frames(two.session_id)
        if f["sessionUpdate"] == "agent_message_chunk"
    )
    assert texts == "B answered."
    for sid in (one.session_id, two.session_id):
        check_cards(client.frames(sid))


@pytest.mark.asyncio(loop_scope="module")
async def test_hostile_pattern_and_glob_complete_over_stdio(
    tmp_path: Path, shared_sdk_agents: SharedSdkAgents
) -> None:
    long_name = "a" * 200  # against which the glob's translation would backtrack
    (tmp_path / long_name).write_text("a" * 50_000 + "!\naaa\n")
    (tmp_path / "other.txt").write_text("aaa\n")
    call = ("call_search", "search", {"pattern": "(a+)+$", "glob": "*a" * 12 + "*"})
    client = RecordingClient()
    conn, server = await shared_sdk_agents.agent(KIND, client)
    server.enqueue(sc.ok(sc.calls_turn(KIND, [call])), sc.ok(sc.text_turn(KIND, "Done.")))
    session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
    reply = await asyncio.wait_for(
        conn.prompt(session_id=session.session_id, prompt=[text_block("go")]), 60
    )
    assert reply.stop_reason == "end_turn"
    frames = client.frames(session.session_id)
    assert _states(client, session.session_id, "call_search")[-1] == "completed"
    completed = next(f for f in frames if f.get("status") == "completed")
    assert completed["rawOutput"] == {"matches": 1, "files": 1, "truncated": False}
    assert f"{long_name}:2:aaa" in str(completed["content"])
    # The search result reached the model on the follow-up request.
    assert f"{long_name}:2:aaa" in str(server.requests[1].body)
