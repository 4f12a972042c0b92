"""The official ACP Python SDK, as the client, talking to a ``JsonRpcConnection`` agent.

Our own client proves the two ends agree with each other; this proves they
agree with an independent implementation of the same wire format.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import acp

from tests.acp_transport.conftest import ECHO_AGENT, echo_agent_env
from tests.support.acp_client import RefusingClient


class _Client(RefusingClient):
    """Just the client methods the echo agent uses."""

    def __init__(self) -> None:
        self.updates: list[Any] = []
        self.update_seen = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update))
        self.update_seen.set()

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> acp.ReadTextFileResponse:
        return acp.ReadTextFileResponse(content=f"contents of {path}")


async def _drive() -> dict[str, Any]:
    client = _Client()
    seen: dict[str, Any] = {}
    async with acp.spawn_agent_process(
        client, sys.executable, str(ECHO_AGENT), env=echo_agent_env()
    ) as (conn, _process):
        init = await asyncio.wait_for(conn.initialize(protocol_version=1), 5)
        seen["protocol"] = init.protocol_version
        session = await asyncio.wait_for(conn.new_session(cwd="/project", mcp_servers=[]), 5)
        seen["session"] = session.session_id
        prompt = asyncio.ensure_future(
            conn.prompt(session_id=session.session_id, prompt=[acp.text_block("hi")])
        )
        await asyncio.wait_for(client.update_seen.wait(), 5)
        seen["read"] = await asyncio.wait_for(
            conn.ext_method("read_via_client", {"sessionId": "s", "path": "/a.txt"}), 5
        )
        await conn.cancel(session_id=session.session_id)
        seen["stop"] = (await asyncio.wait_for(prompt, 5)).stop_reason
        try:
            await asyncio.wait_for(conn.ext_method("no_such_method", {}), 5)
        except acp.RequestError as exc:
            seen["missing"] = exc
        seen["updates"] = client.updates
    return seen


def test_official_sdk_client_drives_the_agent() -> None:
    seen = asyncio.run(asyncio.wait_for(_drive(), 15))
    assert seen["protocol"] == 1
    assert seen["session"] == "echo-/project"
    assert seen["read"] == {"client said": {"content": "contents of /a.txt"}}
    assert seen["stop"] == "cancelled"
    assert seen["missing"].code == -32601
    assert len(seen["updates"]) == 1 and seen["updates"][0][0] == "echo-/project"
