"""Loading or resuming a session the agent has open already, and deleting an id nobody holds.

An editor that reloads its thread (a window reopened, a conformance kit) sends
``session/load`` or ``session/resume`` for a session still open in the same
agent. That attaches it (a load replays the thread first, a resume does not)
and the session goes on: the next prompt continues the same history. Checked
the way an editor meets it: over stdio, through ``--workers 2``, and through
the daemon, with a store behind each.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import pytest

from tests.runtime import scenarios as sc
from tests.support.acp_schema import validate
from tests.support.agent_process import AgentProcess, agent_command
from tests.support.daemon_process import DaemonProcess, daemon_environment
from tests.support.message_log import Message, MessageLog
from tests.support.runtime_harness import provider_base_url
from toolprep.testing import FakeProviderServer
from toolprep.testing.daemon import serve_command

Where = Literal["stdio", "workers", "daemon"]
PLACES: list[Where] = ["stdio", "workers", "daemon"]
KIND = "anthropic"
FIRST, SECOND = "The first answer.", "The second answer."


@contextmanager
def _client(where: Where, server: FakeProviderServer, tmp_path: Path) -> Iterator[MessageLog]:
    """An initialized client of an agent with a store, placed as ``where`` says."""
    data = str(tmp_path / "data")
    if where == "daemon":
        env = daemon_environment({"XDG_DATA_HOME": str(tmp_path / "data-home")})
        command = serve_command(KIND, provider_base_url(KIND, server), "--data-dir", data)
        daemon = DaemonProcess(command, env, tmp_path, tmp_path / "daemon.log")
        try:
            client = daemon.client()
            try:
                client.initialize()
                yield client
            finally:
                client.close()
        finally:
            daemon.kill()
        return
    workers = ("--workers", "2") if where == "workers" else ()
    command, env = agent_command(KIND, server, "--data-dir", data, *workers)
    agent = AgentProcess(command, env, tmp_path, tmp_path / "stderr.log")
    try:
        agent.reply(agent.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}}))
        yield agent
    finally:
        agent.kill()


def _result(client: MessageLog, request_id: int) -> Any:
    reply = client.reply(request_id)
    assert "result" in reply, reply
    return reply["result"]


def _open(client: MessageLog, cwd: Path) -> str:
    params = {"cwd": str(cwd), "mcpServers": []}
    session_id: str = _result(client, client.request("session/new", params))["sessionId"]
    return session_id


def _reopen(client: MessageLog, method: str, session_id: str, cwd: Path) -> tuple[Any, int]:
    """The result of ``method`` for the session, and how many updates came before it."""
    params: dict[str, Any] = {"sessionId": session_id, "cwd": str(cwd)}
    if method == "session/load":
        params["mcpServers"] = []  # required by a load; a resume may leave it out
    validate("LoadSessionRequest" if method == "session/load" else "ResumeSessionRequest", params)
    request_id = client.request(method, params)
    reply = client.reply(request_id)
    assert "result" in reply, reply
    # Replayed frames precede the reply on the connection, so they are all in by now.
    answered_at = next(i for i, m in enumerate(client.messages) if m is reply)
    before = [m for m in client.messages[:answered_at] if m.get("method") == "session/update"]
    return reply["result"], len(before)


def _texts(frames: list[Message], kind: str) -> str:
    return "".join(
        f["content"]["text"]
        for f in frames
        if f["sessionUpdate"] == kind and f["content"]["type"] == "text"
    )


def _turn(client: MessageLog, session_id: str, text: str) -> None:
    assert _result(client, client.prompt(session_id, text))["stopReason"] == "end_turn"


@pytest.mark.parametrize("where", PLACES)
def test_load_of_an_open_session_replays_it_and_the_session_goes_on(
    where: Where, tmp_path: Path
) -> None:
    with FakeProviderServer() as server, _client(where, server, tmp_path) as client:
        server.enqueue(sc.ok(sc.text_turn(KIND, FIRST)), sc.ok(sc.text_turn(KIND, SECOND)))
        session_id = _open(client, tmp_path)
        _turn(client, session_id, "Question one")
        seen = len(client.updates(session_id))

        loaded, before = _reopen(client, "session/load", session_id, tmp_path)
        validate("LoadSessionResponse", loaded)
        replay = client.updates(session_id)[seen:before]
        assert _texts(replay, "user_message_chunk") == "Question one"
        assert _texts(replay, "agent_message_chunk") == FIRST

        _turn(client, session_id, "Question two")
        after = client.updates(session_id)[before:]
        assert _texts(after, "agent_message_chunk") == SECOND
        # The same session went on: the model saw the first exchange with the second question.
        sent = server.requests[-1].body["messages"]
        assert "Question one" in str(sent) and FIRST in str(sent) and "Question two" in str(sent)


@pytest.mark.parametrize("where", PLACES)
def test_resume_of_an_open_session_attaches_without_replay_and_the_session_goes_on(
    where: Where, tmp_path: Path
) -> None:
    with FakeProviderServer() as server, _client(where, server, tmp_path) as client:
        server.enqueue(sc.ok(sc.text_turn(KIND, FIRST)), sc.ok(sc.text_turn(KIND, SECOND)))
        session_id = _open(client, tmp_path)
        _turn(client, session_id, "Question one")
        seen = len(client.updates(session_id))

        resumed, before = _reopen(client, "session/resume", session_id, tmp_path)
        validate("ResumeSessionResponse", resumed)
        between = client.updates(session_id)[seen:before]
        assert _texts(between, "user_message_chunk") == ""
        assert _texts(between, "agent_message_chunk") == ""

        _turn(client, session_id, "Question two")
        after = client.updates(session_id)[before:]
        assert _texts(after, "user_message_chunk") == ""
        assert _texts(after, "agent_message_chunk") == SECOND
        sent = server.requests[-1].body["messages"]
        assert "Question one" in str(sent) and FIRST in str(sent) and "Question two" in str(sent)


@pytest.mark.parametrize("where", PLACES)
def test_deleting_an_id_nobody_holds_succeeds(where: Where, tmp_path: Path) -> None:
    with FakeProviderServer() as server, _client(where, server, tmp_path) as client:
        params = {"sessionId": "sess_never_was"}
        validate("DeleteSessionRequest", params)
        deleted = _result(client, client.request("session/delete", params))
        validate("DeleteSessionResponse", deleted)
        assert deleted == {}
        # A second delete of a session that did exist is as quiet as the first.
        session_id = _open(client, tmp_path)
        for _ in range(2):
            again = client.request("session/delete", {"sessionId": session_id})
            assert _result(client, again) == {}
        listed = _result(client, client.request("session/list", {}))
        assert listed["sessions"] == []
