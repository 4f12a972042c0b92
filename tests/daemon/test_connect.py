"""``toolprep connect``: an editor's stdio bridged to a running ``toolprep serve``.

Each test runs the real daemon and the real ``connect`` process, driven on
its stdio the way an editor drives its agent command; every message the
editor reads is validated against the ACP schema.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from tests.daemon.conftest import KIND, StartDaemon
from tests.runtime import scenarios as sc
from tests.support.agent_process import AgentProcess, connect_command
from tests.support.daemon_process import DaemonProcess, daemon_environment, stop_started_daemons
from tests.support.message_log import Message
from tests.support.processes import alive
from tests.support.runtime_harness import check_cards, lifecycle, message_text, provider_base_url
from tests.support.ws_client import WsClient
from toolprep.runtime.daemon.discovery import read_daemon_file
from toolprep.testing import FakeProviderServer

PERMISSION = "session/request_permission"

OpenEditor = Callable[..., AgentProcess]


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


def _data_home(daemon: DaemonProcess) -> dict[str, str]:
    """The environment under which the default data directory is the daemon's."""
    return {"XDG_DATA_HOME": str(daemon.address_file.parent.parent)}


def _connect_once(*options: str, env_extra: dict[str, str], cwd: Path) -> tuple[int, str]:
    """Run ``toolprep connect OPTIONS`` with an empty stdin; its exit status and stderr."""
    done = subprocess.run(
        connect_command(*options),
        input=b"",
        capture_output=True,
        cwd=cwd,
        env=daemon_environment(env_extra),
        timeout=60,
    )
    assert done.stdout == b"", "stdout is for protocol messages only"
    return done.returncode, done.stderr.decode()


def _tool_turn(client: WsClient | AgentProcess, cwd: Path) -> tuple[str, list[Message]]:
    """initialize, session/new, and a prompt whose shell call the client allows."""
    client.initialize()
    new = client.result(client.request("session/new", {"cwd": str(cwd), "mcpServers": []}))
    session_id: str = new["sessionId"]
    turn = client.prompt(session_id, "run it")
    client.wait_for(lambda ms: any(m.get("method") == PERMISSION for m in ms))
    [ask] = client.requests(PERMISSION)
    client.answer_permission(ask, "allow_once")
    assert client.result(turn)["stopReason"] == "end_turn"
    return session_id, list(client.messages)


def _enqueue_tool_turn(provider: FakeProviderServer) -> None:
    provider.enqueue(
        sc.ok(sc.calls_turn(KIND, [sc.shell("echo bridged", "call_bridged")])),
        sc.ok(sc.text_turn(KIND, "Bridged.")),
    )


def _named_alike(messages: list[Message], session_id: str) -> list[Message]:
    """The messages with the session id and the times replaced, to compare two sessions."""
    renamed: list[Message] = orjson.loads(
        orjson.dumps(messages).replace(session_id.encode(), b"SESSION")
    )
    for message in renamed:
        update = message.get("params", {}).get("update", {})
        if "updatedAt" in update:
            update["updatedAt"] = "TIME"
    return renamed


def test_an_editor_gets_through_connect_the_frames_a_direct_client_gets(
    start_daemon: StartDaemon,
    provider: FakeProviderServer,
    workdir: Path,
    open_editor: OpenEditor,
) -> None:
    daemon = start_daemon("--no-persist", "--workers", "1")
    _enqueue_tool_turn(provider)
    direct = daemon.client()
    try:
        direct_session, direct_messages = _tool_turn(direct, workdir)
    finally:
        direct.close()

    _enqueue_tool_turn(provider)
    editor = open_editor(env_extra=_data_home(daemon))  # found through the default data dir
    bridged_session, bridged_messages = _tool_turn(editor, workdir)
    assert bridged_session != direct_session
    assert _named_alike(bridged_messages, bridged_session) == _named_alike(
        direct_messages, direct_session
    )
    frames = editor.updates(bridged_session)
    check_cards(frames)
    assert lifecycle(frames) == {"call_bridged": ["preparing", "in_progress", "completed"]}
    assert message_text(frames) == "Bridged."

    # A line that is not JSON reaches the daemon as it is, and the daemon answers it.
    editor.send_line(b"{not json")
    editor.wait_for(lambda ms: any(m.get("error", {}).get("code") == -32700 for m in ms))

    editor.close_input()
    assert editor.wait_exit() == 0
    assert editor.stderr() == ""
    assert daemon.stop() == 0


def test_a_session_opened_through_one_connect_loads_through_another(
    start_daemon: StartDaemon,
    provider: FakeProviderServer,
    workdir: Path,
    tmp_path: Path,
    open_editor: OpenEditor,
) -> None:
    data = str(tmp_path / "data")
    daemon = start_daemon("--data-dir", data, "--workers", "1")
    _enqueue_tool_turn(provider)
    first = open_editor("--data-dir", data)
    session_id, _ = _tool_turn(first, workdir)
    sent = first.updates(session_id)
    first.close_input()
    assert first.wait_exit() == 0

    second = open_editor("--data-dir", data)
    second.initialize()
    assert second.load(session_id, workdir)["result"].keys() == {"modes", "configOptions"}
    # The replay starts with the prompt, which the first editor showed itself.
    second.wait_for(lambda _: len(second.updates(session_id)) >= len(sent) + 1)
    [asked, *shown] = second.updates(session_id)
    assert asked["sessionUpdate"] == "user_message_chunk"
    assert asked["content"] == {"type": "text", "text": "run it"}
    assert shown == sent
    check_cards(second.updates(session_id))
    second.close_input()
    assert second.wait_exit() == 0
    assert first.stderr() == second.stderr() == ""
    assert daemon.stop() == 0


def test_with_no_daemon_connect_says_nothing_is_listening(
    start_daemon: StartDaemon, workdir: Path, tmp_path: Path
) -> None:
    empty = tmp_path / "empty-data-home"
    status, said = _connect_once(env_extra={"XDG_DATA_HOME": str(empty)}, cwd=workdir)
    assert status == 2
    assert said == (
        f"toolprep connect: no daemon file at {empty.resolve()}/toolprep/serve.json: is "
        "toolprep serve running? (start it with `toolprep serve`, or pass --start)\n"
    )

    daemon = start_daemon("--no-persist", "--workers", "1")
    os.kill(daemon.process.pid, signal.SIGKILL)  # its serve.json stays behind
    daemon.kill()
    assert daemon.address_file.exists()
    status, said = _connect_once(env_extra=_data_home(daemon), cwd=workdir)
    assert status == 2
    assert said == (
        f"toolprep connect: the daemon named in {daemon.address_file.resolve()} "
        f"(pid {daemon.process.pid}) is not running: removed that stale file "
        "(start it with `toolprep serve`, or pass --start)\n"
    )
    assert not daemon.address_file.exists()


def test_a_token_the_daemon_refuses_is_named_and_the_right_one_connects(
    start_daemon: StartDaemon, workdir: Path, tmp_path: Path, open_editor: OpenEditor
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("s3cret\n")
    daemon = start_daemon("--no-persist", "--workers", "1", "--token-file", str(token_file))
    wrong_file = tmp_path / "wrong-token"
    wrong_file.write_text("guess\n")

    status, said = _connect_once(
        "--url", daemon.url, env_extra={"TOOLPREP_TOKEN": "guess"}, cwd=workdir
    )
    assert status == 2
    assert said == (
        f"toolprep connect: the program at {daemon.url} did not prove it holds the token from "
        "TOOLPREP_TOKEN (its proof of the token is wrong): either that token is wrong or "
        "another program listens there; nothing was sent to it\n"
    )
    status, said = _connect_once(
        "--url", daemon.url, "--token-file", str(wrong_file), env_extra={}, cwd=workdir
    )
    assert status == 2
    assert said == (
        f"toolprep connect: the program at {daemon.url} did not prove it holds the token from "
        f"--token-file {wrong_file} (its proof of the token is wrong): either that token is "
        "wrong or another program listens there; nothing was sent to it\n"
    )
    status, said = _connect_once(
        "--url", daemon.url, "--token", "s3cret", env_extra={}, cwd=workdir
    )
    assert status == 2
    assert "--token: a token on the command line is readable" in said

    editor = open_editor("--url", daemon.url, "--token-file", str(token_file))
    assert editor.initialize()["protocolVersion"] == 1
    editor.close_input()
    assert editor.wait_exit() == 0
    assert daemon.stop() == 0


def test_the_daemon_closing_the_connection_ends_connect_with_its_code(
    start_daemon: StartDaemon, workdir: Path, open_editor: OpenEditor
) -> None:
    daemon = start_daemon("--no-persist", "--workers", "1")
    editor = open_editor(env_extra=_data_home(daemon))
    editor.initialize()
    assert daemon.stop() == 0
    assert editor.wait_exit() == 1
    assert editor.stderr().startswith(
        "toolprep connect: the daemon closed the connection: 1001 (going away)"
    )


def test_a_message_over_the_limit_is_refused_or_ends_connect_clearly(
    start_daemon: StartDaemon, workdir: Path, open_editor: OpenEditor
) -> None:
    daemon = start_daemon("--no-persist", "--workers", "1")
    from_editor = open_editor("--max-message-bytes", "4096", env_extra=_data_home(daemon))
    from_editor.initialize()
    from_editor.send_line(b'{"jsonrpc":"2.0","method":"x","params":"' + b"x" * 5000 + b'"}')
    from_editor.wait_for(lambda ms: any(m.get("error", {}).get("code") == -32600 for m in ms))
    from_editor.initialize()  # the bridge goes on
    from_editor.close_input()
    assert from_editor.wait_exit() == 0
    assert from_editor.stderr() == (
        "toolprep connect: the editor sent a message over the 4096-byte message limit; "
        "it was not forwarded and was answered with an error (-32600)\n"
    )

    from_daemon = open_editor("--max-message-bytes", "200", env_extra=_data_home(daemon))
    from_daemon.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    assert from_daemon.wait_exit() == 1
    assert from_daemon.stderr() == (
        "toolprep connect: the daemon sent a message larger than --max-message-bytes (200 bytes)\n"
    )
    assert daemon.stop() == 0


def test_start_starts_one_daemon_that_outlives_the_editors(
    provider: FakeProviderServer, workdir: Path, tmp_path: Path, open_editor: OpenEditor
) -> None:
    data = tmp_path / "data"
    serve_options = [
        *("--port", "0", "--workers", "1", "--max-retries", "0"),
        *("--provider", KIND, "--base-url", provider_base_url(KIND, provider)),
    ]
    try:
        # Two at once, as an editor opening two agent threads: one starts, one finds it.
        editors = [
            open_editor("--data-dir", str(data), "--start", "--", *serve_options) for _ in range(2)
        ]
        session_id = editors[0].start_session(workdir)
        provider.enqueue(sc.ok(sc.text_turn(KIND, "Started for you.")))
        assert editors[0].result(editors[0].prompt(session_id))["stopReason"] == "end_turn"
        assert message_text(editors[0].updates(session_id)) == "Started for you."
        editors[1].initialize()
        for editor in editors:
            editor.close_input()
            assert editor.wait_exit() == 0
        daemon = read_daemon_file(data)
        assert alive(daemon.pid), "the daemon went away with the editors"
        log = data / "serve.log"
        started = (
            f"toolprep connect: started toolprep serve (pid {daemon.pid}) on {daemon.url}; "
            f"its log: {log.resolve()}\n"
        )
        assert sorted(editor.stderr() for editor in editors) == ["", started]
        assert log.read_text().count("serving ACP on") == 1
    finally:
        stop_started_daemons(data)


def test_sigterm_closes_the_connection_and_exits_0(
    start_daemon: StartDaemon, workdir: Path, open_editor: OpenEditor
) -> None:
    daemon = start_daemon("--no-persist", "--workers", "1")
    editor = open_editor(env_extra=_data_home(daemon))
    session_id = editor.start_session(workdir)
    editor.process.send_signal(signal.SIGTERM)
    assert editor.wait_exit() == 0
    assert editor.stderr() == ""
    # The session is the daemon's: still there for the next client.
    again = daemon.client()
    try:
        again.initialize()
        assert again.load(session_id, workdir)["result"].keys() == {"modes", "configOptions"}
    finally:
        again.close()
    assert daemon.stop() == 0
