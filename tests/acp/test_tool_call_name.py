"""Every tool-call frame names its tool (``name``), from the first preparing card on.

ACP v1 made the tool call's ``name`` the stable field editors read to pick an
icon or a renderer (``title`` is for people and changes as the call is
understood). Checked through the real agent on both wires, for a call that
runs and one whose preparation is discarded by a retry.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.runtime import scenarios as sc
from tests.support.acp_schema import validate_update
from tests.support.agent_process import AgentProcess, agent_command
from tests.support.runtime_harness import unnumbered
from toolprep.testing import FakeProviderServer


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_every_tool_call_frame_carries_the_tools_name(kind: str, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello\n", encoding="utf-8")
    discarded = ("call_gone", "read_file", {"path": "notes.txt"})
    ran = ("call_ran", "list_directory", {"path": "."})
    with FakeProviderServer() as server:
        server.enqueue(
            sc.prepared_then_error(kind, discarded),
            sc.ok(sc.calls_turn(kind, [ran])),
            sc.ok(sc.text_turn(kind)),
        )
        command, env = agent_command(kind, server, "--no-persist")
        agent = AgentProcess(command, env, tmp_path, tmp_path / "stderr.log")
        try:
            session_id = agent.start_session(tmp_path)
            answer = agent.reply(agent.prompt(session_id, "look around"))
            assert answer["result"]["stopReason"] == "end_turn", answer
            frames = agent.updates(session_id)
        finally:
            agent.kill()
    cards = [f for f in frames if f["sessionUpdate"] in ("tool_call", "tool_call_update")]
    by_call: dict[str, list[dict[str, object]]] = {}
    for frame in cards:
        validate_update(frame, session_id)
        by_call.setdefault(str(frame["toolCallId"]), []).append(frame)
    assert set(by_call) == {"call_gone", "call_ran"}, cards
    for call_id, name in (("call_gone", "read_file"), ("call_ran", "list_directory")):
        first, *rest = by_call[call_id]
        assert first["sessionUpdate"] == "tool_call"
        assert unnumbered(first)["_meta"] == {
            "toolName": name,
            "phase": "preparing",
            "provenance": "builtin",
        }
        assert [f.get("name") for f in by_call[call_id]] == [name] * (1 + len(rest))
    assert by_call["call_gone"][-1]["status"] == "failed"
    assert by_call["call_ran"][-1]["status"] == "completed"
