"""The file tools over real stdio while another process swaps a directory with an outside link.

The loopback provider scripts one turn calling search, glob, list_directory
and read_file many times through ``inside/sub``, which a separate process
keeps exchanging (atomically) with a symlink to a directory outside the
session. Nothing from that directory, neither a file name nor a byte of
content, may reach the editor's cards or the model's next request.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from acp import text_block

from tests.runtime import scenarios as sc
from tests.support.agent_process import RecordingClient, agent_command, running_agent
from tests.support.runtime_harness import check_cards, lifecycle
from tests.tools.dir_flipper import flipping
from toolprep.testing import FakeProviderServer

KIND = "anthropic"
ROUNDS = 15
OUTSIDE_NAME = "zqoutname7f3"
OUTSIDE_BYTES = "zqoutbytes91c"
# Finds the outside content without spelling it (a pattern is echoed in results).
FIND = OUTSIDE_BYTES[:5] + "." + OUTSIDE_BYTES[6:] + "|inside"

pytestmark = pytest.mark.timeout(120)


def _tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    project, outside = tmp_path / "project", tmp_path / "outside"
    sub = project / "inside" / "sub"
    sub.mkdir(parents=True)
    (sub / "inner.txt").write_text("inside inner\n")
    outside.mkdir()
    (outside / f"{OUTSIDE_NAME}.txt").write_text(f"{OUTSIDE_BYTES}\n")
    (outside / "inner.txt").write_text(f"{OUTSIDE_BYTES} inner\n")
    spare = project / "spare"
    spare.symlink_to(outside, target_is_directory=True)
    return project, sub, spare


async def test_no_outside_name_or_byte_reaches_editor_or_model(tmp_path: Path) -> None:
    project, sub, spare = _tree(tmp_path)
    calls = []
    for i in range(ROUNDS):
        calls += [
            (f"search_{i}", "search", {"pattern": FIND}),
            (f"glob_{i}", "glob", {"pattern": "**"}),
            (f"list_{i}", "list_directory", {"path": "inside/sub"}),
            (f"read_{i}", "read_file", {"path": "inside/sub/inner.txt"}),
        ]
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.calls_turn(KIND, calls)), sc.ok(sc.text_turn(KIND, "Done.")))
        client = RecordingClient()
        with flipping(sub, spare, tmp_path / "flips") as flipper:
            async with running_agent(*agent_command(KIND, server), client) as (conn, _):
                session = await conn.new_session(cwd=str(project), mcp_servers=[])
                await asyncio.to_thread(flipper.wait_past, 0)
                reply = await asyncio.wait_for(
                    conn.prompt(session_id=session.session_id, prompt=[text_block("go")]), 90
                )
            assert flipper.flips() > 0
        assert reply.stop_reason == "end_turn"
        frames = client.frames(session.session_id)
        check_cards(frames)
        states = lifecycle(frames)
        assert all(states[call_id][-1] in ("completed", "failed") for call_id, _, _ in calls)
        shown = str(frames) + str(server.requests[1].body)
        assert "inside inner" in shown  # the tools did reach the inside directory
        assert OUTSIDE_NAME not in shown
        assert OUTSIDE_BYTES not in shown
