"""The editor is asked about the whole command, not its first 80 characters, over stdio."""

from __future__ import annotations

from pathlib import Path

from acp import text_block

from tests.acp.conftest import RecordingClient, agent_command, running_agent
from tests.runtime import scenarios as sc
from tests.support.fake_provider import FakeProviderServer

KIND = "openai"


async def test_permission_request_shows_every_line_and_character(tmp_path: Path) -> None:
    long_line = "echo " + "x" * 120 + " ; touch hidden-at-the-end"
    command = f"{long_line}\ntouch second-line"
    shell = ("call_sh", "run_shell_command", {"command": command})
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.calls_turn(KIND, [shell])), sc.ok(sc.text_turn(KIND, "No.")))
        client = RecordingClient(permission="reject_once")
        async with running_agent(*agent_command(KIND, server), client) as (conn, _):
            session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
        assert reply.stop_reason == "end_turn"
        [asked] = [m for m in client.raw if m.get("method") == "session/request_permission"]
        title = asked["params"]["toolCall"]["title"]
        assert title == f"Run (multi-line, 2 lines):\n{long_line}\ntouch second-line"
        assert not (tmp_path / "second-line").exists()  # rejected, so nothing ran
