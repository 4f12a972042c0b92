"""One message limit end to end: ``serve``, ``connect`` and ``acp`` agree on it.

The bridge used to stop at its own 8 MiB whatever the daemon took, and ended
at the first line over it; and the daemon and ``acp`` sent frames of any size,
so a model writing a 9 MB file made a card no ``connect`` could pass, live or
when the session was loaded again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.daemon.conftest import KIND, StartDaemon
from tests.runtime import scenarios as sc
from tests.support.agent_process import AgentProcess, agent_command, connect_command
from tests.support.daemon_process import daemon_environment
from tests.support.message_log import Message
from toolprep.testing import FakeProviderServer

OpenEditor = Callable[..., AgentProcess]

MIB = 1024 * 1024
DEFAULT_LIMIT = 8 * MIB
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601


@pytest.fixture
def open_editor(tmp_path: Path, workdir: Path) -> Iterator[OpenEditor]:
    """``open_editor(*options)``: ``toolprep connect OPTIONS`` on pipes; killed at the end."""
    opened: list[AgentProcess] = []

    def open_(*options: str, env_extra: dict[str, str] | None = None) -> AgentProcess:
        log = tmp_path / f"connect-{len(opened)}.log"
        editor = AgentProcess(
            connect_command(*options), daemon_environment(env_extra), workdir, log
        )
        opened.append(editor)
        return editor

    yield open_
    for editor in opened:
        editor.kill()


def _request_line(request_id: int, method: str, pad: int) -> bytes:
    """A request of ``pad`` bytes and more, to a method the agent does not have."""
    return orjson.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {"pad": "p" * pad}}
    )


def _error_of(client: AgentProcess, predicate: Callable[[Message], bool]) -> Message:
    client.wait_for(lambda ms: any("error" in m and predicate(m) for m in ms), timeout=60)
    [error] = [m for m in client.messages if "error" in m and predicate(m)]
    return error


def _write_turn(provider: FakeProviderServer, path: str, content: str) -> None:
    call = ("call_big", "write_file", {"path": path, "content": content})
    provider.enqueue(
        sc.ok(sc.calls_turn(KIND, [call], fragment_size=MIB)),
        sc.ok(sc.text_turn(KIND, "Written.")),
    )


def _update_of(message: Message) -> dict[str, Any]:
    update: dict[str, Any] = message.get("params", {}).get("update", {})
    return update


def _truncated(messages: list[Message]) -> list[dict[str, Any]]:
    """The cut cards' ``_meta.toolprep.truncated`` markers."""
    marks: list[dict[str, Any]] = []
    for message in messages:
        mark = _update_of(message).get("_meta", {}).get("toolprep", {}).get("truncated")
        if mark is not None:
            marks.append(mark)
    return marks


def _check_fits(messages: list[Message], limit: int) -> None:
    sizes = [len(orjson.dumps(m)) for m in messages]
    assert max(sizes) <= limit, sorted(sizes)[-3:]


def test_connect_takes_the_daemons_limit_and_answers_a_line_over_it(
    start_daemon: StartDaemon, workdir: Path, tmp_path: Path, open_editor: OpenEditor
) -> None:
    data = str(tmp_path / "data")
    limit = 16 * MIB
    daemon = start_daemon("--data-dir", data, "--max-message-bytes", str(limit))
    editor = open_editor("--data-dir", data)
    editor.initialize()

    # 9 MiB: over connect's old default of its own, within the daemon's limit: it gets there.
    editor.send_line(_request_line(7, "x/unknown", 9 * MIB))
    assert _error_of(editor, lambda m: m["id"] == 7)["error"]["code"] == METHOD_NOT_FOUND

    # Over the daemon's limit: answered as `acp` answers it, and the bridge goes on.
    editor.send_line(_request_line(8, "x/unknown", limit + 1))
    refused = _error_of(editor, lambda m: m["error"]["code"] == INVALID_REQUEST)
    assert refused["id"] is None
    assert refused["error"]["data"] == {"maxLineBytes": limit}
    assert editor.result(editor.request("session/new", {"cwd": str(workdir), "mcpServers": []}))

    editor.close_input()
    assert editor.wait_exit() == 0
    assert editor.stderr() == (
        f"toolprep connect: the editor sent a message over the {limit}-byte message limit; "
        "it was not forwarded and was answered with an error (-32600)\n"
    )
    assert daemon.stop() == 0


def test_acp_answers_a_line_over_its_limit_as_connect_does(
    provider: FakeProviderServer, workdir: Path, tmp_path: Path
) -> None:
    command, env = agent_command(KIND, provider)
    agent = AgentProcess(command, env, workdir, tmp_path / "acp.log")
    try:
        agent.reply(agent.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}}))
        assert agent.process.stdin is not None
        agent.process.stdin.write(_request_line(8, "x/unknown", DEFAULT_LIMIT + 1) + b"\n")
        agent.process.stdin.flush()
        agent.wait_for(lambda ms: any("error" in m for m in ms), timeout=60)
        [refused] = [m for m in agent.messages if "error" in m]
        assert refused["id"] is None
        assert refused["error"]["code"] == INVALID_REQUEST
        assert refused["error"]["data"] == {"maxLineBytes": DEFAULT_LIMIT}
        agent.close_input()
        assert agent.wait_exit() == 0
    finally:
        agent.kill()


@pytest.mark.timeout(300)
def test_a_session_that_wrote_a_9_mb_file_runs_and_loads_through_connect(
    start_daemon: StartDaemon,
    provider: FakeProviderServer,
    workdir: Path,
    tmp_path: Path,
    open_editor: OpenEditor,
) -> None:
    data = str(tmp_path / "data")
    daemon = start_daemon("--data-dir", data, "--workers", "1", "--mode", "auto")
    content = "x" * (9 * MIB)
    _write_turn(provider, "big.txt", content)
    first = open_editor("--data-dir", data)
    session_id = first.start_session(workdir)
    turn = first.result(first.prompt(session_id, "write it"), timeout=120)
    assert turn["stopReason"] == "end_turn"
    assert (workdir / "big.txt").read_text() == content
    _check_fits(first.messages, DEFAULT_LIMIT)
    [live] = _truncated(first.messages)
    assert live["limitBytes"] == DEFAULT_LIMIT and live["originalBytes"] > 9 * MIB
    first.close_input()
    assert first.wait_exit() == 0

    second = open_editor("--data-dir", data)
    second.initialize()
    assert "result" in second.load(session_id, workdir)
    second.wait_for(lambda ms: any(_truncated(ms)) and any("Written." in str(m) for m in ms))
    _check_fits(second.messages, DEFAULT_LIMIT)
    [replayed] = _truncated(second.messages)
    assert replayed["originalBytes"] > 9 * MIB
    [card] = [
        u for u in map(_update_of, second.messages) if _truncated([{"params": {"update": u}}])
    ]
    cut = card["rawInput"]["content"]
    assert cut.startswith("x" * 1000)
    assert "bytes cut here: the message was over the 8388608-byte message limit" in cut
    second.close_input()
    assert second.wait_exit() == 0
    assert first.stderr() == second.stderr() == ""
    assert daemon.stop() == 0


@pytest.mark.timeout(300)
def test_acp_cuts_a_card_over_its_limit_with_a_note(
    provider: FakeProviderServer, workdir: Path, tmp_path: Path
) -> None:
    _write_turn(provider, "big.txt", "y" * (9 * MIB))
    command, env = agent_command(KIND, provider, "--mode", "auto")
    agent = AgentProcess(command, env, workdir, tmp_path / "acp.log")
    try:
        session_id = agent.start_session(workdir)
        reply = agent.reply(agent.prompt(session_id, "write it"), timeout=120)
        assert reply["result"]["stopReason"] == "end_turn"
        _check_fits(agent.messages, DEFAULT_LIMIT)
        [mark] = _truncated(agent.messages)
        assert mark == {"originalBytes": mark["originalBytes"], "limitBytes": DEFAULT_LIMIT}
        assert mark["originalBytes"] > 9 * MIB
        agent.close_input()
        assert agent.wait_exit() == 0
    finally:
        agent.kill()
