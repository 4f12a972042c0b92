"""``toolprep serve``: the MCP servers a network client names are the user's decision.

The real daemon, driven over WebSocket: a stdio entry is refused unless the
daemon was started with ``--allow-mcp-command PROGRAM`` or
``--allow-client-mcp``, and an ``http``/``sse`` URL on a loopback or
internal address unless with ``--allow-mcp-network``; a refused entry starts
nothing. What is allowed runs in the worker processes too, whose runtimes
receive the policy with the other options.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.acp.test_mcp import echo_server, http_echo_server  # noqa: F401 (a fixture)
from tests.daemon.conftest import KIND, StartDaemon
from tests.runtime import scenarios as sc
from tests.support.message_log import Message
from tests.support.ws_client import WsClient
from toolprep.testing import FakeProviderServer

INVALID_PARAMS = -32602
REPO = Path(__file__).resolve().parents[2]


def _echo_entry(tag: str) -> dict[str, Any]:
    return echo_server(tag).model_dump(by_alias=True, exclude_none=True)


def _marking_entry(marker: Path) -> dict[str, Any]:
    """A stdio server whose program, should it ever run, leaves ``marker`` behind."""
    return {"name": "marker", "command": "/bin/sh", "args": ["-c", f"touch '{marker}'"]}


def _new(client: WsClient, cwd: Path, servers: list[dict[str, Any]]) -> Message:
    return client.reply(
        client.request("session/new", {"cwd": str(cwd), "mcpServers": servers}), timeout=60
    )


def _offered(provider: FakeProviderServer, index: int) -> set[str]:
    return {tool["name"] for tool in provider.requests[index].body.get("tools", [])}


def test_a_client_named_command_is_refused_and_never_runs(
    start_daemon: StartDaemon, workdir: Path, tmp_path: Path
) -> None:
    daemon = start_daemon("--no-persist", "--workers", "1")
    marker = tmp_path / "ran"
    client = daemon.client()
    try:
        client.initialize()
        answer = _new(client, workdir, [_marking_entry(marker)])
    finally:
        client.close()
    assert daemon.stop() == 0
    assert answer["error"]["code"] == INVALID_PARAMS
    message = answer["error"]["message"]
    assert "'/bin/sh'" in message
    assert "--allow-mcp-command /bin/sh" in message
    assert "--allow-client-mcp" in message
    assert not marker.exists()


def test_load_and_resume_refuse_a_client_named_command_too(
    start_daemon: StartDaemon, workdir: Path, tmp_path: Path
) -> None:
    daemon = start_daemon("--data-dir", str(tmp_path / "data"), "--workers", "2")
    marker = tmp_path / "ran"
    client = daemon.client()
    try:
        session_id = client.start_session(workdir)
        params = {"sessionId": session_id, "cwd": str(workdir)}
        refused = [_marking_entry(marker)]
        # While the session is live (a load would not start servers, but must still refuse)...
        live = client.reply(client.request("session/load", {**params, "mcpServers": refused}))
        assert "result" in client.reply(client.request("session/close", params))
        # ...and once it is closed, for both ways back in.
        answers = [
            client.reply(client.request(method, {**params, "mcpServers": refused}), timeout=60)
            for method in ("session/load", "session/resume")
        ]
        # Refusals leave the session loadable.
        assert "result" in client.load(session_id, workdir)
    finally:
        client.close()
    assert daemon.stop() == 0
    for answer in (live, *answers):
        assert answer["error"]["code"] == INVALID_PARAMS, answer
        assert "--allow-mcp-command /bin/sh" in answer["error"]["message"]
    assert not marker.exists()


@pytest.mark.parametrize("allow", ["--allow-mcp-command", "--allow-client-mcp"])
def test_an_allowed_command_starts_in_a_worker_and_its_tools_are_offered(
    allow: str,
    start_daemon: StartDaemon,
    provider: FakeProviderServer,
    workdir: Path,
) -> None:
    options = [allow, sys.executable] if allow == "--allow-mcp-command" else [allow]
    daemon = start_daemon("--no-persist", "--workers", "2", *options)
    provider.enqueue(sc.ok(sc.text_turn(KIND, "Tools seen.")))
    marker = workdir / "ran"  # the session's directory: a sandboxed server may write there
    client = daemon.client()
    try:
        client.initialize()
        opened = _new(client, workdir, [_echo_entry(f"serve-mcp-{uuid.uuid4().hex}")])
        session_id = opened["result"]["sessionId"]
        assert client.result(client.prompt(session_id), timeout=60)["stopReason"] == "end_turn"
        other = _new(client, workdir, [_marking_entry(marker)])
    finally:
        client.close()
    assert daemon.stop() == 0
    assert "mcp__echo__echo" in _offered(provider, 0)
    if allow == "--allow-mcp-command":
        # Only the program named: another is still refused.
        assert other["error"]["code"] == INVALID_PARAMS
        assert not marker.exists()
    else:
        assert "result" in other
        assert marker.exists()


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://127.0.0.1:9/mcp", "127.0.0.1, a loopback address"),
        ("http://localhost:9/mcp", "a loopback address"),
        ("http://[::ffff:127.0.0.1]:9/mcp", "a loopback address"),
        ("http://0x7f000001:9/mcp", "127.0.0.1, a loopback address"),
        ("http://10.1.2.3/mcp", "10.1.2.3, a private address"),
        ("http://169.254.169.254/latest/meta-data", "a link-local address"),
        ("http://[::]:9/mcp", "an unspecified address"),
        ("http://224.0.0.1/mcp", "a multicast address"),
        ("http://240.0.0.1/mcp", "a reserved address"),
        ("file:///etc/passwd", "only http(s) URLs with a host are allowed"),
    ],
)
def test_an_internal_url_is_refused_without_allow_mcp_network(
    url: str, said: str, start_daemon: StartDaemon, workdir: Path
) -> None:
    daemon = start_daemon("--no-persist", "--workers", "1")
    client = daemon.client()
    try:
        client.initialize()
        answer = _new(client, workdir, [{"type": "http", "name": "web", "url": url, "headers": []}])
        sse = _new(client, workdir, [{"type": "sse", "name": "old", "url": url, "headers": []}])
    finally:
        client.close()
    assert daemon.stop() == 0
    for refused in (answer, sse):
        assert refused["error"]["code"] == INVALID_PARAMS, refused
        assert said in refused["error"]["message"]
        assert "--allow-mcp-network" in refused["error"]["message"]


def test_allow_mcp_network_reaches_a_loopback_server(
    start_daemon: StartDaemon,
    provider: FakeProviderServer,
    workdir: Path,
    http_echo_server: str,  # noqa: F811 (the fixture imported above)
) -> None:
    daemon = start_daemon("--no-persist", "--workers", "2", "--allow-mcp-network")
    provider.enqueue(sc.ok(sc.text_turn(KIND, "Web tools seen.")))
    client = daemon.client()
    try:
        client.initialize()
        web = {"type": "http", "name": "web", "url": http_echo_server, "headers": []}
        session_id = _new(client, workdir, [web])["result"]["sessionId"]
        assert client.result(client.prompt(session_id), timeout=60)["stopReason"] == "end_turn"
        # The network flag allows no command.
        command = _new(client, workdir, [_echo_entry(f"serve-mcp-{uuid.uuid4().hex}")])
    finally:
        client.close()
    assert daemon.stop() == 0
    assert "mcp__web__echo" in _offered(provider, 0)
    assert command["error"]["code"] == INVALID_PARAMS
