"""Input no well-behaved client sends: each gets a specific error, and nothing is lost."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.runtime import scenarios as sc
from tests.support.agent_process import AgentProcess, agent_command
from tests.support.runtime_harness import check_cards, lifecycle
from toolprep.testing import FakeProviderServer


def _started(server: FakeProviderServer, workdir: Path) -> AgentProcess:
    command, env = agent_command("anthropic", server, "--max-line-bytes", "4096")
    raw = AgentProcess(command, env, workdir, workdir / "stderr.log")
    raw.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}})
    reply, _ = raw.read_until_id(0)
    assert reply["result"]["protocolVersion"] == 1
    return raw


@pytest.fixture(scope="module")
def shared_agent(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[AgentProcess, FakeProviderServer]]:
    """One agent for the tests that leave it running: each opens sessions of its own."""
    with FakeProviderServer() as server:
        raw = _started(server, tmp_path_factory.mktemp("shared-agent"))
        try:
            yield raw, server
        finally:
            raw.dispose()


@pytest.fixture
def agent(
    shared_agent: tuple[AgentProcess, FakeProviderServer],
) -> tuple[AgentProcess, FakeProviderServer]:
    """The shared agent, read from the end of what earlier tests left, its provider clean."""
    raw, server = shared_agent
    assert raw.process.poll() is None, raw.stderr()
    raw.skip_read()
    server.reset()
    return raw, server


@pytest.fixture
def own_agent(tmp_path: Path) -> Iterator[tuple[AgentProcess, FakeProviderServer]]:
    """An agent of the test's own, for a test that ends it."""
    with FakeProviderServer() as server:
        raw = _started(server, tmp_path)
        try:
            yield raw, server
        finally:
            raw.dispose()


def _error(agent: AgentProcess, request_id: object) -> dict[str, object]:
    reply, _ = agent.read_until_id(request_id)
    assert "error" in reply, reply
    return reply["error"]  # type: ignore[no-any-return]


def _still_works(agent: AgentProcess, tmp_path: Path, request_id: int = 99) -> str:
    agent.send(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "session/new",
            "params": {"cwd": str(tmp_path), "mcpServers": []},
        }
    )
    reply, _ = agent.read_until_id(request_id)
    return str(reply["result"]["sessionId"])


def test_parse_error(agent: tuple[AgentProcess, FakeProviderServer], tmp_path: Path) -> None:
    raw, _ = agent
    raw.send_raw(b'{"jsonrpc": "2.0", "id": 1, "method": \n')
    error = _error(raw, None)
    assert error["code"] == -32700
    _still_works(raw, tmp_path)


def test_invalid_request(agent: tuple[AgentProcess, FakeProviderServer], tmp_path: Path) -> None:
    raw, _ = agent
    raw.send({"id": 2, "method": "session/new", "params": {}})  # no "jsonrpc": "2.0"
    assert _error(raw, 2)["code"] == -32600
    raw.send({"jsonrpc": "2.0", "id": 3, "method": 7})
    assert _error(raw, 3)["code"] == -32600
    _still_works(raw, tmp_path)


def test_unknown_method_is_named(
    agent: tuple[AgentProcess, FakeProviderServer], tmp_path: Path
) -> None:
    raw, _ = agent
    raw.send({"jsonrpc": "2.0", "id": 4, "method": "session/teleport", "params": {}})
    error = _error(raw, 4)
    assert error["code"] == -32601 and "session/teleport" in str(error["message"])
    _still_works(raw, tmp_path)


@pytest.mark.parametrize(
    ("method", "params", "field"),
    [
        ("session/new", {"mcpServers": []}, "cwd"),
        ("session/new", {"cwd": "relative/path", "mcpServers": []}, "cwd"),
        ("session/prompt", {"prompt": [{"type": "text", "text": "x"}]}, "sessionId"),
        ("initialize", {"protocolVersion": "one"}, "protocolVersion"),
    ],
)
def test_bad_params_name_the_field(
    agent: tuple[AgentProcess, FakeProviderServer],
    tmp_path: Path,
    method: str,
    params: dict[str, object],
    field: str,
) -> None:
    raw, _ = agent
    raw.send({"jsonrpc": "2.0", "id": 5, "method": method, "params": params})
    error = _error(raw, 5)
    assert error["code"] == -32602 and field in str(error["message"])
    _still_works(raw, tmp_path)


def test_bad_prompt_block_is_named(
    agent: tuple[AgentProcess, FakeProviderServer], tmp_path: Path
) -> None:
    raw, _ = agent
    session_id = _still_works(raw, tmp_path, 6)
    raw.send(
        {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "session/prompt",
            "params": {"sessionId": session_id, "prompt": [{"type": "hologram"}]},
        }
    )
    error = _error(raw, 7)
    assert error["code"] == -32602 and "prompt[0]" in str(error["message"])


def test_unknown_session_is_a_clear_error(
    agent: tuple[AgentProcess, FakeProviderServer], tmp_path: Path
) -> None:
    raw, _ = agent
    raw.send(
        {
            "jsonrpc": "2.0",
            "id": 8,
            "method": "session/prompt",
            "params": {"sessionId": "nope", "prompt": [{"type": "text", "text": "x"}]},
        }
    )
    error = _error(raw, 8)
    assert "nope" in str(error["message"]) and "not found" in str(error["message"]).lower()
    raw.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "nope"}})
    _still_works(raw, tmp_path)


def test_oversized_line_is_rejected_and_next_line_served(
    agent: tuple[AgentProcess, FakeProviderServer], tmp_path: Path
) -> None:
    raw, _ = agent
    raw.send_raw(
        b'{"jsonrpc":"2.0","id":9,"method":"session/new","params":{"cwd":"'
        + b"x" * 10_000
        + b'"}}\n'
    )
    error = _error(raw, None)
    assert "4096" in str(error["message"]) or "too large" in str(error["message"]).lower()
    _still_works(raw, tmp_path)


def test_stdin_eof_mid_turn_discards_cards_and_exits(
    own_agent: tuple[AgentProcess, FakeProviderServer], tmp_path: Path
) -> None:
    raw, server = own_agent
    server.enqueue(sc.prepared_then_stall("anthropic", ("call_eof", "read_file", {"path": "a"})))
    session_id = _still_works(raw, tmp_path, 10)
    raw.send(
        {
            "jsonrpc": "2.0",
            "id": 11,
            "method": "session/prompt",
            "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": "go"}]},
        }
    )
    frames: list[dict[str, Any]] = []
    while not any((f.get("_meta") or {}).get("phase") == "preparing" for f in frames):
        message = raw.read()
        if message.get("method") == "session/update":
            frames.append(message["params"]["update"])
    assert raw.close(timeout=15) == 0
    for message in raw.unread():  # what it wrote before it exited
        if message.get("method") == "session/update":
            frames.append(message["params"]["update"])
    check_cards(frames)
    assert lifecycle(frames) == {"call_eof": ["preparing", "discarded"]}


def test_a_second_prompt_while_a_turn_runs_is_refused_by_its_own_code(
    own_agent: tuple[AgentProcess, FakeProviderServer], tmp_path: Path
) -> None:
    """One turn at a time: the editor's mistake, told as such (not -32603, the agent's own
    faults), and the running turn goes on."""
    raw, server = own_agent
    server.enqueue(sc.prepared_then_stall("anthropic", ("call_first", "read_file", {"path": "a"})))
    session_id = _still_works(raw, tmp_path, 10)
    prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": "go"}]}
    raw.send({"jsonrpc": "2.0", "id": 11, "method": "session/prompt", "params": prompt})
    frames: list[dict[str, Any]] = []
    while not any((f.get("_meta") or {}).get("phase") == "preparing" for f in frames):
        message = raw.read()
        if message.get("method") == "session/update":
            frames.append(message["params"]["update"])
    raw.send({"jsonrpc": "2.0", "id": 12, "method": "session/prompt", "params": prompt})
    error = _error(raw, 12)
    assert error["code"] == -32006, error
    assert "already running" in str(error["message"]), error
    raw.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session_id}})
    reply, _ = raw.read_until_id(11)
    assert reply["result"]["stopReason"] == "cancelled", reply
