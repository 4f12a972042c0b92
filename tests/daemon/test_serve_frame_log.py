"""``toolprep serve``: a client resumes a session after the last frame it saw.

Frames carry their number in the session's log (``_meta.toolprep.seq``), the same
number whether a client gets them live, from the daemon's copy of a live session or
from the store after a restart; ``session/load`` with ``_meta.toolprep.afterSeq`` sends
only what came after.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from tests.daemon.conftest import KIND, StartDaemon
from tests.runtime import scenarios as sc
from tests.support.acp_schema import validate_update
from tests.support.daemon_process import DaemonProcess
from tests.support.message_log import Message
from tests.support.runtime_harness import message_text
from tests.support.ws_client import WsClient
from toolprep.messages import frames as fr
from toolprep.testing import FakeProviderServer


def _load_after(client: WsClient, session_id: str, cwd: Path, after_seq: int) -> list[Message]:
    """What a ``session/load`` resuming after frame ``after_seq`` replays to ``client``."""
    before = len(client.updates(session_id))
    params: dict[str, Any] = {
        "sessionId": session_id,
        "cwd": str(cwd),
        "mcpServers": [],
        "_meta": {"toolprep": {"afterSeq": after_seq}},
    }
    assert "result" in client.reply(client.request("session/load", params))
    return client.updates(session_id)[before:]


def _resume_after_a_turn(
    daemon: DaemonProcess, workdir: Path
) -> tuple[str, list[Message], list[Message]]:
    """A driver's turn in a new session, then another client's load of the live session in
    full and its load resuming after frame 3; the daemon is stopped after.

    Returns the session, the full load and the resumed one. Checked here: one numbering,
    the log's, from 1; the driver was shown all but its own prompt.
    """
    driver, watcher = daemon.client(), daemon.client()
    try:
        session_id = driver.start_session(workdir)
        assert driver.result(driver.prompt(session_id, "keep this"))["stopReason"] == "end_turn"
        sent = driver.updates(session_id)
        watcher.initialize()
        assert "result" in watcher.load(session_id, workdir)  # the live session, in full
        whole = watcher.updates(session_id)
        resumed = _load_after(watcher, session_id, workdir, 3)
    finally:
        watcher.close()
        driver.close()
    assert daemon.stop() == 0
    assert [fr.seq_of(u) for u in whole] == list(range(1, len(whole) + 1))
    assert [u for u in whole if u["sessionUpdate"] != "user_message_chunk"] == sent
    assert len(whole) > 3
    return session_id, whole, resumed


def test_a_client_resumes_a_live_session_and_a_stored_one_after_a_frame(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path, tmp_path: Path
) -> None:
    data = str(tmp_path / "data")
    provider.enqueue(
        sc.ok(sc.calls_turn(KIND, [sc.shell("echo kept", "call_kept")])),
        sc.ok(sc.text_turn(KIND, "Kept.")),
    )
    daemon = start_daemon("--data-dir", data, "--allow-shell", "--workers", "1")
    session_id, whole, live_resumed = _resume_after_a_turn(daemon, workdir)

    restarted = start_daemon("--data-dir", data, "--allow-shell", "--workers", "1")
    reader = restarted.client()
    try:
        reader.initialize()
        stored_resumed = _load_after(reader, session_id, workdir, 3)
    finally:
        reader.close()
    assert restarted.stop() == 0
    assert live_resumed == whole[3:]
    assert stored_resumed == whole[3:]


def test_after_a_kill_mid_turn_a_client_resumes_past_every_frame_it_saw(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path, tmp_path: Path
) -> None:
    """The daemon is killed (SIGKILL) while an answer streams after the turn's last card:
    that text was shown and never stored. After a restart every new number is past every
    number shown, a client resuming after the last frame it saw gets every later frame
    (from the live session, and from the store after a clean stop), and a gap mark bounds
    what the log lacks."""
    data = str(tmp_path / "data")
    text = "An answer the daemon is killed while streaming."
    provider.enqueue(
        sc.ok(sc.calls_turn(KIND, [sc.shell("echo one", "call_1")])),
        sc.text_then_stall(KIND, text),
        sc.ok(sc.text_turn(KIND, "After the restart.")),
    )
    options = ("--data-dir", data, "--allow-shell", "--workers", "1")
    daemon = start_daemon(*options)
    driver = daemon.client()
    try:
        session_id = driver.start_session(workdir)
        shown = driver.prompt_until_shown(session_id, text)
        os.kill(daemon.process.pid, signal.SIGKILL)
        driver.wait_closed()
    finally:
        driver.close()
    daemon.kill()
    seen = max(fr.seq_of(u) or 0 for u in shown)
    assert all(fr.seq_of(u) is not None for u in shown)

    restarted = start_daemon(*options)
    resumer, watcher = restarted.client(), restarted.client()
    try:
        resumer.initialize()
        _load_after(resumer, session_id, workdir, seen)
        assert resumer.result(resumer.prompt(session_id, "again"))["stopReason"] == "end_turn"
        later = resumer.updates(session_id)
        watcher.initialize()
        live_resumed = _load_after(watcher, session_id, workdir, seen)
    finally:
        watcher.close()
        resumer.close()
    assert restarted.stop() == 0

    again = start_daemon(*options)
    reader = again.client()
    try:
        reader.initialize()
        stored_resumed = _load_after(reader, session_id, workdir, seen)
    finally:
        reader.close()
    assert again.stop() == 0
    assert all((fr.seq_of(u) or 0) > seen for u in later)
    assert "After the restart." in message_text(later)
    assert [u for u in live_resumed if u["sessionUpdate"] != "user_message_chunk"] == later
    assert stored_resumed == live_resumed
    for update in live_resumed:
        validate_update(update, session_id)
    [mark] = [u for u in live_resumed if "gap" in u["_meta"]["toolprep"]]
    gap = mark["_meta"]["toolprep"]["gap"]
    lost = [u for u in shown if u["sessionUpdate"] == "agent_message_chunk"]
    assert lost and gap["afterSeq"] < min(fr.seq_of(u) or 0 for u in lost)
    assert gap["afterSeq"] + gap["missing"] >= seen and gap["upTo"] is True
    assert (
        "updates were not saved here: the agent stopped before they were stored]"
        in (mark["content"]["text"])
    )


def test_without_a_store_a_client_resumes_a_live_session_after_a_frame(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path
) -> None:
    """``--no-persist``: the daemon's copy of the live session is its log, numbered all the
    same, so a client resuming after a frame gets only what came after it."""
    provider.enqueue(
        sc.ok(sc.calls_turn(KIND, [sc.shell("echo kept", "call_kept")])),
        sc.ok(sc.text_turn(KIND, "Kept.")),
    )
    daemon = start_daemon("--no-persist", "--allow-shell", "--workers", "1")
    _, whole, resumed = _resume_after_a_turn(daemon, workdir)
    assert resumed == whole[3:]
