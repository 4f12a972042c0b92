"""Big files and the editor channel, over real stdio with the official ACP client SDK.

An editor answering ``fs/read_text_file`` with a file larger than the agent's
line limit used to leave the tool waiting for its 30 s timeout; it must fail at
once with the sizes, and the session must go on serving prompts. A write over
a huge file must not put the whole file into a card frame.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from acp import text_block
from acp.schema import ReadTextFileResponse

from tests.runtime import scenarios as sc
from tests.support.agent_process import (
    RecordingClient,
    SharedSdkAgents,
)
from tests.support.runtime_harness import check_cards, lifecycle
from toolprep.runtime.acp.jsonrpc_transport import DEFAULT_MAX_LINE_BYTES
from toolprep.runtime.tools.config import ToolConfig

KIND = "anthropic"
HUGE_BYTES = DEFAULT_MAX_LINE_BYTES + 1024 * 1024


class HugeBufferClient(RecordingClient):
    """An editor whose buffer for ``huge.txt`` is bigger than the agent accepts in one line."""

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> ReadTextFileResponse:
        if path.endswith("huge.txt"):
            return ReadTextFileResponse(content="h" * HUGE_BYTES)
        return await super().read_text_file(session_id, path, line, limit, **kwargs)


def _failure_text(frames: list[dict[str, Any]], call_id: str) -> str:
    failed = [f for f in frames if f.get("toolCallId") == call_id and f.get("status") == "failed"]
    assert len(failed) == 1, lifecycle(frames)
    return str(failed[0].get("content"))


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("workers", ["1", "2"])  # the failed answer crosses the worker front
async def test_huge_editor_reply_fails_the_read_at_once_and_the_session_goes_on(
    workers: str, tmp_path: Path, shared_sdk_agents: SharedSdkAgents
) -> None:
    (tmp_path / "huge.txt").write_text("on disk\n")
    (tmp_path / "small.txt").write_text("small file\n")
    client = HugeBufferClient()
    conn, server = await shared_sdk_agents.agent(KIND, client, "--workers", workers, client_fs=True)
    server.enqueue(
        sc.ok(sc.calls_turn(KIND, [("call_huge", "read_file", {"path": "huge.txt"})])),
        sc.ok(sc.text_turn(KIND, "That file is too big.")),
        sc.ok(sc.calls_turn(KIND, [("call_small", "read_file", {"path": "small.txt"})])),
        sc.ok(sc.text_turn(KIND, "Read the small one.")),
    )
    session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
    reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("read")])
    again = await conn.prompt(session_id=session.session_id, prompt=[text_block("more")])
    frames = client.frames()
    check_cards(frames)
    assert reply.stop_reason == "end_turn" and again.stop_reason == "end_turn"
    message = _failure_text(frames, "call_huge")
    # Failed by the size of the reply, at once: waiting out the editor timeout fails the
    # read with "the editor did not answer" instead.
    assert "did not answer" not in message
    # The SDK's reply line: the content plus its JSON envelope, so at least this much over.
    assert "file too large for the editor channel (" in message
    assert f"bytes over the {DEFAULT_MAX_LINE_BYTES}-byte limit)" in message
    over = int(message.split("editor channel (")[1].split(" bytes")[0])
    assert HUGE_BYTES - DEFAULT_MAX_LINE_BYTES <= over < HUGE_BYTES - DEFAULT_MAX_LINE_BYTES + 500
    assert "file too large for the editor channel" in str(server.requests[1].body)
    # The same session then reads through the editor as usual.
    assert lifecycle(frames)["call_small"][-1] == "completed"
    assert "small file" in str(server.requests[3].body)


@pytest.mark.asyncio(loop_scope="module")
async def test_write_over_a_huge_file_sends_a_small_card(
    tmp_path: Path, shared_sdk_agents: SharedSdkAgents
) -> None:
    huge = tmp_path / "dump.log"
    huge.write_bytes(b"log line\n" * (10 * 1024 * 1024 // 9))
    write = ("call_write", "write_file", {"path": "dump.log", "content": "trimmed\n"})
    client = RecordingClient()
    conn, server = await shared_sdk_agents.agent(KIND, client)
    server.enqueue(sc.ok(sc.calls_turn(KIND, [write])), sc.ok(sc.text_turn(KIND, "Done.")))
    session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
    reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("trim")])
    assert reply.stop_reason == "end_turn"
    check_cards(client.frames())
    assert huge.read_text() == "trimmed\n"
    largest = max(len(orjson.dumps(message)) for message in client.raw)
    assert largest < 64 * 1024, largest  # the diff alone would be over ten megabytes
    cap = ToolConfig().max_diff_bytes
    assert f"bytes over the {cap}-byte cap" in str(client.frames())
