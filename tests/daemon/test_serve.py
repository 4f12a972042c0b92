"""``toolprep serve``: sessions owned by the daemon, shared by clients, kept across restarts.

Each test runs the real daemon process against the loopback provider and
drives it with real WebSocket clients; every message the daemon sends is
validated against the ACP schema by the client.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.daemon.conftest import KIND, StartDaemon
from tests.runtime import scenarios as sc
from tests.support.eventually import eventually
from tests.support.message_log import Message
from tests.support.runtime_harness import check_cards, lifecycle, message_text
from tests.support.ws_client import WsClient
from toolprep.testing import FakeProviderServer

PERMISSION = "session/request_permission"
CANCEL_REQUEST = "$/cancel_request"


def _asked(client: WsClient, count: int = 1) -> list[Message]:
    client.wait_for(lambda ms: sum(m.get("method") == PERMISSION for m in ms) >= count)
    return client.requests(PERMISSION)


def test_two_clients_share_a_session_and_the_first_permission_answer_wins(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path
) -> None:
    daemon = start_daemon("--no-persist", "--workers", "1")
    provider.enqueue(
        sc.ok(sc.calls_turn(KIND, [sc.shell("echo shared", "call_shared")])),
        sc.ok(sc.text_turn(KIND, "Both saw it.")),
    )
    first, second = daemon.client(), daemon.client()
    try:
        session_id = first.start_session(workdir)
        turn = first.prompt(session_id, "run it")
        [first_ask] = _asked(first)

        second.initialize()
        assert second.load(session_id, workdir)["result"].keys() == {"modes", "configOptions"}
        [second_ask] = _asked(second)  # asked again: the request is still open
        assert second_ask["params"]["toolCall"] == first_ask["params"]["toolCall"]
        second.answer_permission(second_ask, "allow_once")

        # The first client's request is withdrawn, and its late answer changes nothing.
        first.wait_for(lambda ms: any(m.get("method") == CANCEL_REQUEST for m in ms))
        [withdrawn] = first.requests(CANCEL_REQUEST)
        assert withdrawn["params"] == {"requestId": first_ask["id"]}
        first.answer_permission(first_ask, "reject_once")

        assert first.result(turn)["stopReason"] == "end_turn"
        # The first client has every frame of the turn: they came before its reply.
        everything = first.updates(session_id)
        assert message_text(everything) == "Both saw it."
        # The second client also has the prompt, which the first one showed itself.
        second.wait_for(lambda _: len(second.updates(session_id)) >= len(everything) + 1)
        [asked, *shown] = second.updates(session_id)
        assert asked["sessionUpdate"] == "user_message_chunk"
        assert asked["content"] == {"type": "text", "text": "run it"}
        assert shown == everything
        check_cards(first.updates(session_id))
        assert lifecycle(first.updates(session_id)) == {
            "call_shared": ["preparing", "in_progress", "completed"]
        }
        assert "shared" in str(first.updates(session_id))
    finally:
        first.close()
        second.close()
    assert daemon.stop() == 0


def test_a_second_client_cancels_the_turn_the_first_started(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path
) -> None:
    daemon = start_daemon("--no-persist", "--workers", "2")
    provider.enqueue(sc.prepared_then_stall(KIND, ("call_stall", "get_weather", {})))
    first, second = daemon.client(), daemon.client()
    try:
        session_id = first.start_session(workdir)
        turn = first.prompt(session_id)
        first.wait_for(lambda _: "call_stall" in lifecycle(first.updates(session_id)))
        second.initialize()
        assert second.load(session_id, workdir, "session/resume")["result"].keys() == {
            "modes",
            "configOptions",
        }
        second.send(
            {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session_id}}
        )
        assert first.result(turn)["stopReason"] == "cancelled"
        assert lifecycle(first.updates(session_id)) == {"call_stall": ["preparing", "discarded"]}
        # Resumed without replay: the second client saw only what came after it attached.
        second.wait_for(lambda _: len(second.updates(session_id)) >= 1)
        assert lifecycle(second.updates(session_id)) == {"call_stall": ["discarded"]}
    finally:
        first.close()
        second.close()
    assert daemon.stop() == 0


def test_a_model_one_client_picks_is_announced_to_every_client_of_the_session(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path
) -> None:
    daemon = start_daemon("--no-persist", "--workers", "2", "--fallback-model", "backup-model")
    provider.enqueue(sc.ok(sc.text_turn(KIND, "From the backup.")))
    first, second = daemon.client(), daemon.client()
    try:
        session_id = first.start_session(workdir)
        second.initialize()
        loaded = second.load(session_id, workdir)["result"]
        option, _mode = loaded["configOptions"]
        assert option["options"][1]["value"] == "backup-model"
        assert option["currentValue"] != "backup-model"
        params = {"sessionId": session_id, "configId": "model", "value": "backup-model"}
        first.result(first.request("session/set_config_option", params))
        second.wait_for(lambda _: bool(second.updates(session_id)))
        [update] = second.updates(session_id)
        assert update["sessionUpdate"] == "config_option_update"
        assert update["configOptions"][0]["currentValue"] == "backup-model"
        assert second.result(second.prompt(session_id))["stopReason"] == "end_turn"
        assert provider.requests[-1].body["model"] == "backup-model"
    finally:
        first.close()
        second.close()
    assert daemon.stop() == 0


def test_a_client_that_reconnects_mid_turn_gets_everything_and_finishes_it(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path
) -> None:
    daemon = start_daemon("--no-persist", "--workers", "1", "--disconnect-grace", "60")
    provider.enqueue(
        sc.ok(sc.calls_turn(KIND, [sc.shell("echo again", "call_back")])),
        sc.ok(sc.text_turn(KIND, "Finished after the reconnect.")),
    )
    first = daemon.client()
    session_id = first.start_session(workdir)
    first.prompt(session_id)
    _asked(first)
    seen_before = first.updates(session_id)
    first.close()  # the editor window went away; the turn waits for its permission

    again = daemon.client()
    try:
        again.initialize()
        assert again.load(session_id, workdir)["result"].keys() == {"modes", "configOptions"}
        [ask] = _asked(again)
        # The prompt first: the client rebuilding the thread did not send it.
        [asked, *replayed] = again.updates(session_id)
        assert asked["sessionUpdate"] == "user_message_chunk"
        assert asked["content"] == {"type": "text", "text": "go"}
        assert replayed[: len(seen_before)] == seen_before
        again.answer_permission(ask, "allow_once")
        again.wait_for(
            lambda _: message_text(again.updates(session_id)) == "Finished after the reconnect."
        )
        frames = again.updates(session_id)
        check_cards(frames)
        assert lifecycle(frames) == {"call_back": ["preparing", "in_progress", "completed"]}
    finally:
        again.close()
    assert daemon.stop() == 0


def test_with_detached_turns_cancel_a_turn_nobody_comes_back_to_ends_after_the_grace(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path, tmp_path: Path
) -> None:
    # Kept, so that it can be looked at once it is closed too, a grace period after its turn.
    data = str(tmp_path / "data")
    daemon = start_daemon(
        "--data-dir",
        data,
        "--workers",
        "1",
        "--disconnect-grace",
        "0.5",
        "--detached-turns",
        "cancel",
    )
    provider.enqueue(sc.prepared_then_stall(KIND, ("call_left", "get_weather", {})))
    first = daemon.client()
    session_id = first.start_session(workdir)
    first.prompt(session_id)
    first.wait_for(lambda _: "call_left" in lifecycle(first.updates(session_id)))
    first.close()

    # Each look attaches a client (which holds the turn) for a moment: look seldom.
    def discarded() -> list[Message]:
        frames = daemon.replayed(session_id, workdir)
        assert lifecycle(frames).get("call_left") == ["preparing", "discarded"], frames
        return frames

    frames = eventually(discarded, timeout=30, interval=1.5)
    check_cards(frames)
    assert daemon.stop() == 0


def test_sessions_are_listed_and_loaded_alike_after_a_restart(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path, tmp_path: Path
) -> None:
    data = str(tmp_path / "data")
    provider.enqueue(
        sc.ok(sc.calls_turn(KIND, [sc.shell("echo kept", "call_kept")])),
        sc.ok(sc.text_turn(KIND, "Kept.")),
    )
    daemon = start_daemon("--data-dir", data, "--allow-shell", "--workers", "1")
    client = daemon.client()
    session_id = client.start_session(workdir)
    assert client.result(client.prompt(session_id, "keep this"))["stopReason"] == "end_turn"
    sent = client.updates(session_id)
    client.close()
    assert daemon.stop() == 0

    restarted = start_daemon("--data-dir", data, "--allow-shell", "--workers", "2")
    reader = restarted.client()
    try:
        reader.initialize()
        listed = reader.result(reader.request("session/list", {"cwd": str(workdir)}))
        assert [s["sessionId"] for s in listed["sessions"]] == [session_id]
        assert listed["sessions"][0]["title"] == "keep this"
        assert reader.load(session_id, workdir)["result"].keys() == {"modes", "configOptions"}
        reader.wait_for(lambda _: len(reader.updates(session_id)) >= len(sent) + 1)
        # The prompt, then what was sent: identical, and no card left pending.
        [asked, *replayed] = reader.updates(session_id)
        assert asked["sessionUpdate"] == "user_message_chunk"
        assert asked["content"] == {"type": "text", "text": "keep this"}
        assert replayed == sent
        check_cards(reader.updates(session_id))
    finally:
        reader.close()
    assert restarted.stop() == 0
    # Every process closed its connection: the write-ahead log was checkpointed away.
    assert not Path(data, "sessions.db-wal").exists()


def test_after_a_kill_the_interrupted_cards_load_as_discarded(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path, tmp_path: Path
) -> None:
    data = str(tmp_path / "data")
    provider.enqueue(
        sc.ok(sc.calls_turn(KIND, [sc.shell("echo never", "call_cut")])),
    )
    daemon = start_daemon("--data-dir", data, "--workers", "1")
    client = daemon.client()
    session_id = client.start_session(workdir)
    client.prompt(session_id)
    _asked(client)  # its card is open, waiting for permission
    os.kill(daemon.process.pid, signal.SIGKILL)
    client.wait_closed()
    daemon.kill()

    restarted = start_daemon("--data-dir", data, "--workers", "1")
    reader = restarted.client()
    try:
        reader.initialize()
        assert reader.load(session_id, workdir)["result"].keys() == {"modes", "configOptions"}
        reader.wait_for(lambda _: "call_cut" in lifecycle(reader.updates(session_id)))
        frames = reader.updates(session_id)
        check_cards(frames)
        assert lifecycle(frames)["call_cut"][-1] == "discarded"
        assert not (workdir / "never").exists()
    finally:
        reader.close()
    assert restarted.stop() == 0


def test_a_token_is_required_when_set_and_anything_else_gets_401(
    start_daemon: StartDaemon, workdir: Path, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("s3cret\nnot part of it\n")
    daemon = start_daemon("--no-persist", "--workers", "1", "--token-file", str(token_file))
    for headers in (None, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
        with pytest.raises(InvalidStatus) as refused:
            connect(daemon.url, additional_headers=headers, legacy=True)
        assert refused.value.response.status_code == 401
    with pytest.raises(InvalidStatus) as elsewhere:
        connect(daemon.url.replace("/acp", "/other"), legacy=True)
    assert elsewhere.value.response.status_code == 404
    client = WsClient(daemon.url, "s3cret")
    try:
        assert client.start_session(workdir).startswith("sess_")
    finally:
        client.close()
    assert daemon.stop() == 0


def test_the_token_may_come_from_the_environment(start_daemon: StartDaemon, workdir: Path) -> None:
    daemon = start_daemon("--no-persist", "--workers", "1", env_extra={"TOOLPREP_TOKEN": "envtok"})
    assert daemon.token == "envtok"
    with pytest.raises(InvalidStatus):
        connect(daemon.url, legacy=True)
    client = WsClient(daemon.url, "envtok")
    try:
        client.initialize()
    finally:
        client.close()
    assert daemon.stop() == 0


def test_a_non_loopback_address_without_a_token_is_refused(
    start_daemon: StartDaemon,
) -> None:
    with pytest.raises(AssertionError, match="needs --token-file or TOOLPREP_TOKEN"):
        start_daemon("--no-persist", "--workers", "1", "--host", "0.0.0.0")


def test_the_session_limit_is_a_named_error(start_daemon: StartDaemon, workdir: Path) -> None:
    daemon = start_daemon("--no-persist", "--workers", "1", "--max-sessions", "1")
    client = daemon.client()
    try:
        client.start_session(workdir)
        refused = client.reply(
            client.request("session/new", {"cwd": str(workdir), "mcpServers": []})
        )
        assert refused["error"]["code"] == -32001
        assert "at most 1 open sessions" in refused["error"]["message"]
        assert refused["error"]["data"] == {"maxSessions": 1}
    finally:
        client.close()
    assert daemon.stop() == 0


def test_bad_frames_get_errors_and_an_oversized_one_costs_only_its_connection(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path
) -> None:
    daemon = start_daemon("--no-persist", "--workers", "1", "--max-message-bytes", "65536")
    client = daemon.client()
    session_id = client.start_session(workdir)
    client.socket.send("{not json", text=True)
    client.send({"jsonrpc": "2.0", "id": 90, "method": "no/such_method", "params": {}})
    client.wait_for(lambda ms: any(m.get("id") == 90 for m in ms))
    errors = [m["error"] for m in client.messages if "error" in m]
    assert errors[0]["code"] == -32700 and errors[1]["code"] == -32601

    client.socket.send("x" * 70_000, text=True)
    assert client.wait_closed() == 1009  # message too big: this connection only

    provider.enqueue(sc.ok(sc.text_turn(KIND, "Still here.")))
    again = daemon.client()
    try:
        again.initialize()
        assert again.load(session_id, workdir, "session/resume")["result"].keys() == {
            "modes",
            "configOptions",
        }
        assert again.result(again.prompt(session_id))["stopReason"] == "end_turn"
        assert message_text(again.updates(session_id)) == "Still here."
    finally:
        again.close()
    assert daemon.stop() == 0


def test_cancel_request_for_a_prompt_ends_its_turn(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path
) -> None:
    daemon = start_daemon("--no-persist", "--workers", "1")
    provider.enqueue(sc.prepared_then_stall(KIND, ("call_req", "get_weather", {})))
    client = daemon.client()
    try:
        session_id = client.start_session(workdir)
        turn = client.prompt(session_id)
        client.wait_for(lambda _: "call_req" in lifecycle(client.updates(session_id)))
        client.send({"jsonrpc": "2.0", "method": CANCEL_REQUEST, "params": {"requestId": turn}})
        assert client.result(turn)["stopReason"] == "cancelled"
        assert lifecycle(client.updates(session_id)) == {"call_req": ["preparing", "discarded"]}
    finally:
        client.close()
    assert daemon.stop() == 0


def test_editor_reads_go_to_the_client_whose_prompt_runs(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path
) -> None:
    daemon = start_daemon("--no-persist", "--workers", "2")
    (workdir / "notes.txt").write_text("on disk\n")
    provider.enqueue(
        sc.ok(sc.calls_turn(KIND, [("call_read", "read_file", {"path": "notes.txt"})])),
        sc.ok(sc.text_turn(KIND, "Read it.")),
    )
    editor, watcher = daemon.client(), daemon.client()
    try:
        editor.initialize({"fs": {"readTextFile": True, "writeTextFile": False}})
        session_id = editor.result(
            editor.request("session/new", {"cwd": str(workdir), "mcpServers": []})
        )["sessionId"]
        watcher.initialize()
        watcher.load(session_id, workdir, "session/resume")
        turn = editor.prompt(session_id)
        editor.wait_for(lambda ms: any(m.get("method") == "fs/read_text_file" for m in ms))
        [read] = editor.requests("fs/read_text_file")
        assert read["params"]["path"] == str(workdir / "notes.txt")
        editor.send({"jsonrpc": "2.0", "id": read["id"], "result": {"content": "unsaved buffer"}})
        assert editor.result(turn)["stopReason"] == "end_turn"
        assert "unsaved buffer" in str(editor.updates(session_id))
        assert watcher.requests("fs/read_text_file") == []
        watcher.wait_for(lambda _: message_text(watcher.updates(session_id)) == "Read it.")
    finally:
        editor.close()
        watcher.close()
    assert daemon.stop() == 0


def test_a_deleted_session_cannot_be_loaded_and_its_id_is_not_reused(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path, tmp_path: Path
) -> None:
    daemon = start_daemon("--data-dir", str(tmp_path / "data"), "--workers", "1")
    provider.enqueue(sc.ok(sc.text_turn(KIND, "Soon gone.")))
    client, other = daemon.client(), daemon.client()
    try:
        session_id = client.start_session(workdir)
        assert client.result(client.prompt(session_id))["stopReason"] == "end_turn"
        other.initialize()
        assert other.load(session_id, workdir)["result"].keys() == {"modes", "configOptions"}
        assert client.result(client.request("session/delete", {"sessionId": session_id})) == {}
        gone = other.reply(other.prompt(session_id))["error"]
        assert gone["code"] == -32002 and session_id in gone["message"]
        missing = other.load(session_id, workdir)["error"]
        assert missing["code"] == -32002
        listed = other.result(other.request("session/list", {}))
        assert session_id not in str(listed)
    finally:
        client.close()
        other.close()
    assert daemon.stop() == 0


@pytest.mark.parametrize("workers", ["1", "2"])
def test_deleting_a_session_mid_turn_ends_the_turn_before_its_rows_go(
    start_daemon: StartDaemon,
    provider: FakeProviderServer,
    workdir: Path,
    tmp_path: Path,
    workers: str,
) -> None:
    """Another client's delete ends the running turn (cancelled, its card discarded) and
    nothing of it is written after the session's rows are gone: no "could not be saved"."""
    daemon = start_daemon("--data-dir", str(tmp_path / "data"), "--workers", workers)
    provider.enqueue(sc.prepared_then_stall(KIND, ("call_doomed", "get_weather", {})))
    client, other = daemon.client(), daemon.client()
    try:
        session_id = client.start_session(workdir)
        prompt = client.prompt(session_id)
        client.wait_for(lambda _: "call_doomed" in lifecycle(client.updates(session_id)))
        other.initialize()
        assert other.result(other.request("session/delete", {"sessionId": session_id})) == {}
        assert client.result(prompt)["stopReason"] == "cancelled"
        frames = client.updates(session_id)
        assert lifecycle(frames)["call_doomed"] == ["preparing", "discarded"]
        assert "could not be saved" not in str(frames)
        assert other.load(session_id, workdir)["error"]["code"] == -32002
        assert session_id not in str(other.result(other.request("session/list", {})))
    finally:
        client.close()
        other.close()
    assert daemon.stop() == 0
    assert "not found" not in daemon.stderr().lower(), daemon.stderr()


def test_a_corrupt_database_stops_start_up_with_its_name(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "sessions.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(AssertionError, match=r"sessions\.db") as failed:
        start_daemon("--data-dir", str(data), "--workers", "1")
    assert "exited 2" in str(failed.value)
    assert (data / "sessions.db").read_bytes().startswith(b"this is not a database")
