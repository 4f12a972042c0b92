"""``serve_stdio`` and ``serve_websocket``: ACP served from the test's own process with a
``Runtime`` of its own (the embedded replay provider), as an embedder serves it; what the
agent sends is checked against the ACP schema (``MessageLog``)."""

from __future__ import annotations

import os
import queue
import threading
from pathlib import Path
from typing import IO

import orjson
import pytest

from tests.support.message_log import Message, MessageLog
from tests.support.runtime_harness import RecordingSink
from tests.support.ws_client import WsClient
from toolprep import ModelRoute, ReplayProvider, Runtime, serve_stdio, serve_websocket
from toolprep.runtime.kernel.session_host import HostClosed

DEADLINE_S = 60.0
TOKEN = "embedder-token"


def _runtime() -> Runtime:
    return Runtime([ModelRoute(ReplayProvider.from_script(), "replay")])


def _said(log: MessageLog, session_id: str) -> str:
    return "".join(
        u["content"]["text"]
        for u in log.updates(session_id)
        if u["sessionUpdate"] == "agent_message_chunk"
    )


class PipeClient(MessageLog):
    """The editor's end of two pipes: requests written to one, the agent's lines read from
    the other by a thread."""

    def __init__(self, to_agent: IO[bytes], from_agent: IO[bytes]) -> None:
        super().__init__()
        self._to_agent = to_agent
        self._from_agent = from_agent
        self._reader = threading.Thread(target=self._read, name="pipe-client", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self._from_agent:
            self.record(orjson.loads(line))

    def send(self, message: Message) -> None:
        self._to_agent.write(orjson.dumps(message) + b"\n")
        self._to_agent.flush()

    def start_session(self, cwd: Path) -> str:
        self.reply(self.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}}))
        answer = self.reply(self.request("session/new", {"cwd": str(cwd), "mcpServers": []}))
        session_id: str = answer["result"]["sessionId"]
        return session_id

    def leave(self) -> None:
        """Close the agent's input, as an editor that quits does; then read to the end."""
        self._to_agent.close()
        self._reader.join(DEADLINE_S)
        assert not self._reader.is_alive(), "the agent's output is still open"


def test_serve_stdio_serves_given_streams_and_returns_when_the_client_leaves(
    tmp_path: Path,
) -> None:
    agent_in_r, agent_in_w = os.pipe()
    agent_out_r, agent_out_w = os.pipe()
    with (
        open(agent_in_r, "rb", buffering=0) as agent_input,
        open(agent_out_w, "wb") as agent_output,
        open(agent_in_w, "wb") as to_agent,
        open(agent_out_r, "rb") as from_agent,
    ):
        agent = threading.Thread(
            target=serve_stdio,
            args=(_runtime(),),
            kwargs={"input_stream": agent_input, "output_stream": agent_output},
            name="agent",
        )
        agent.start()
        client = PipeClient(to_agent, from_agent)
        try:
            session_id = client.start_session(tmp_path)
            reply = client.reply(client.prompt(session_id, "hi"), timeout=DEADLINE_S)
        finally:
            to_agent.close()
            agent.join(DEADLINE_S)
            returned = not agent.is_alive()
            agent_output.close()  # the agent is done with it: the client reads to the end
            client.leave()

    assert returned, "serve_stdio did not return once its input ended"
    assert reply["result"]["stopReason"] == "end_turn", reply
    assert _said(client, session_id)


def test_serve_websocket_serves_a_runtime_until_asked_to_stop(tmp_path: Path) -> None:
    stop = threading.Event()
    urls: queue.Queue[str] = queue.Queue()
    server = threading.Thread(
        target=serve_websocket,
        args=(_runtime(),),
        kwargs={"token": TOKEN, "stop_requested": stop.is_set, "on_listening": urls.put},
        name="server",
    )
    server.start()
    try:
        url = urls.get(timeout=DEADLINE_S)
        client = WsClient(url, TOKEN)
        try:
            session_id = client.start_session(tmp_path)
            result = client.result(client.prompt(session_id, "hi"), timeout=DEADLINE_S)
            said = _said(client, session_id)
        finally:
            client.close()
    finally:
        stop.set()
        server.join(DEADLINE_S)

    assert not server.is_alive(), "serve_websocket did not return once asked to stop"
    assert url.startswith("ws://127.0.0.1:") and url.endswith("/acp"), url
    assert result["stopReason"] == "end_turn", result
    assert said


@pytest.mark.parametrize(
    ("token", "host", "said"),
    [
        ("", "127.0.0.1", "the token is empty"),
        ("short-token", "0.0.0.0", "0.0.0.0 with the token of 11 characters"),
    ],
)
def test_serve_websocket_refuses_a_token_that_cannot_guard_its_address(
    token: str, host: str, said: str, tmp_path: Path
) -> None:
    runtime = _runtime()
    with pytest.raises(ValueError, match=said):
        serve_websocket(runtime, token=token, host=host)

    with pytest.raises(HostClosed, match="the runtime is shut down"):
        runtime.open_session(tmp_path, RecordingSink())
