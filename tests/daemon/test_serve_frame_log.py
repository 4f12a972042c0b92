"""``toolprep serve``: a client resumes a session after the last frame it saw.

Frames carry their number in the session's log (``_meta.toolprep.seq``), the same
number whether a client gets them live, from the daemon's copy of a live session or
from the store after a restart; ``session/load`` with ``_meta.toolprep.afterSeq`` sends
only what came after.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.daemon.conftest import KIND, StartDaemon
from tests.runtime import scenarios as sc
from tests.support.fake_provider import FakeProviderServer
from tests.support.message_log import Message
from tests.support.ws_client import WsClient
from toolprep.messages import frames as fr


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


def test_a_client_resumes_a_live_session_and_a_stored_one_after_a_frame(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path, tmp_path: Path
) -> None:
    data = str(tmp_path / "data")
    provider.enqueue(
        sc.ok(sc.calls_turn(KIND, [sc.shell("echo kept", "call_kept")])),
        sc.ok(sc.text_turn(KIND, "Kept.")),
    )
    daemon = start_daemon("--data-dir", data, "--allow-shell", "--workers", "1")
    driver = daemon.client()
    session_id = driver.start_session(workdir)
    assert driver.result(driver.prompt(session_id, "keep this"))["stopReason"] == "end_turn"
    sent = driver.updates(session_id)
    watcher = daemon.client()
    try:
        watcher.initialize()
        assert "result" in watcher.load(session_id, workdir)  # the live session, in full
        whole = watcher.updates(session_id)
        live_resumed = _load_after(watcher, session_id, workdir, 3)
    finally:
        watcher.close()
        driver.close()
    assert daemon.stop() == 0

    restarted = start_daemon("--data-dir", data, "--allow-shell", "--workers", "1")
    reader = restarted.client()
    try:
        reader.initialize()
        stored_resumed = _load_after(reader, session_id, workdir, 3)
    finally:
        reader.close()
    assert restarted.stop() == 0
    # One numbering: the log's, from 1; the driver was shown all but its own prompt.
    assert [fr.seq_of(u) for u in whole] == list(range(1, len(whole) + 1))
    assert [u for u in whole if u["sessionUpdate"] != "user_message_chunk"] == sent
    assert len(whole) > 3
    assert live_resumed == whole[3:]
    assert stored_resumed == whole[3:]
