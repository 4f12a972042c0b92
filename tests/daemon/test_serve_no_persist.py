"""``toolprep serve --no-persist``: sessions nobody comes back to are closed after the
grace period, and ``session/list`` pages as it does with a store."""

from __future__ import annotations

from pathlib import Path

from tests.daemon.conftest import StartDaemon
from tests.support.eventually import eventually
from toolprep.runtime.daemon.session_pool import LIST_PAGE_SIZE


def test_an_idle_session_nobody_comes_back_to_is_closed_after_the_grace_period(
    start_daemon: StartDaemon, workdir: Path
) -> None:
    daemon = start_daemon("--no-persist", "--workers", "1", "--disconnect-grace", "0.2")
    first = daemon.client()
    session_id = first.start_session(workdir)
    watcher = daemon.client()
    try:
        watcher.initialize()

        def listed() -> list[str]:
            page = watcher.result(watcher.request("session/list", {}))
            return [s["sessionId"] for s in page["sessions"]]

        assert listed() == [session_id]
        first.close()  # the grace period starts

        def gone() -> bool:
            assert not listed(), daemon.stderr()
            return True

        eventually(gone, interval=0.1)
        reply = watcher.load(session_id, workdir)
        assert reply["error"]["code"] == -32002, reply  # gone: nothing kept it
    finally:
        watcher.close()
    assert daemon.stop() == 0


def test_the_session_list_pages_without_a_store(start_daemon: StartDaemon, workdir: Path) -> None:
    daemon = start_daemon("--no-persist", "--workers", "1")
    client = daemon.client()
    try:
        client.initialize()
        new = {"cwd": str(workdir), "mcpServers": []}
        opened = {
            client.result(client.request("session/new", new))["sessionId"]
            for _ in range(LIST_PAGE_SIZE + 1)
        }
        first = client.result(client.request("session/list", {}))
        assert len(first["sessions"]) == LIST_PAGE_SIZE
        second = client.result(client.request("session/list", {"cursor": first["nextCursor"]}))
        assert second["nextCursor"] is None
        listed = [s["sessionId"] for s in first["sessions"] + second["sessions"]]
        assert len(listed) == len(set(listed)) and set(listed) == opened
        bad = client.reply(client.request("session/list", {"cursor": "nope"}))
        assert bad["error"]["code"] == -32602, bad
    finally:
        client.close()
    assert daemon.stop() == 0
