"""Session modes through ``toolprep serve``: a mode one client picks is announced to every
client of the session and governs the session's calls, whichever client prompts."""

from __future__ import annotations

from pathlib import Path

from tests.daemon.conftest import KIND, StartDaemon
from tests.runtime import scenarios as sc
from tests.support.acp_schema import validate
from tests.support.message_log import Message
from tests.support.ws_client import WsClient
from toolprep.testing import FakeProviderServer

WRITE = ("call_write", "write_file", {"path": "written.txt", "content": "text\n"})
SHELL = sc.shell("touch shell-ran")


def _announced(client: WsClient, session_id: str) -> list[str]:
    return [
        u["currentModeId"]
        for u in client.updates(session_id)
        if u["sessionUpdate"] == "current_mode_update"
    ]


def _mode_options(client: WsClient, session_id: str) -> list[str]:
    return [
        option["currentValue"]
        for u in client.updates(session_id)
        if u["sessionUpdate"] == "config_option_update"
        for option in u["configOptions"]
        if option["id"] == "mode"
    ]


def _last_card(client: WsClient, session_id: str, call_id: str) -> Message:
    [*_, last] = [u for u in client.updates(session_id) if u.get("toolCallId") == call_id]
    return last


def test_a_mode_one_client_picks_is_announced_to_the_other_and_governs_its_turns(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path
) -> None:
    daemon = start_daemon("--no-persist", "--workers", "2")
    provider.enqueue(
        sc.ok(sc.calls_turn(KIND, [WRITE])),
        sc.ok(sc.text_turn(KIND)),
        sc.ok(sc.calls_turn(KIND, [SHELL])),
        sc.ok(sc.text_turn(KIND)),
    )
    first, second = daemon.client(), daemon.client()
    try:
        session_id = first.start_session(workdir)
        second.initialize()
        loaded = second.load(session_id, workdir)["result"]
        validate("LoadSessionResponse", loaded)
        assert loaded["modes"]["currentModeId"] == "ask"

        first.result(first.request("session/set_mode", {"sessionId": session_id, "modeId": "plan"}))
        second.wait_for(lambda _: _announced(second, session_id) == ["plan"])
        second.wait_for(lambda _: _mode_options(second, session_id) == ["plan"])
        assert second.result(second.prompt(session_id))["stopReason"] == "end_turn"
        card = _last_card(second, session_id, "call_write")
        assert card["status"] == "failed"
        assert card["title"] == "write_file: not run, plan mode allows read-only tools"
        assert not (workdir / "written.txt").exists()

        params = {"sessionId": session_id, "configId": "mode", "value": "auto"}
        second.result(second.request("session/set_config_option", params))
        first.wait_for(lambda _: _announced(first, session_id) == ["plan", "auto"])
        assert first.result(first.prompt(session_id))["stopReason"] == "end_turn"
        assert _last_card(first, session_id, "call_sh")["status"] == "completed"
        assert (workdir / "shell-ran").exists()
        for client in (first, second):  # nobody was asked
            assert client.requests("session/request_permission") == []
    finally:
        first.close()
        second.close()
    assert daemon.stop() == 0
