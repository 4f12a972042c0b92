"""``toolprep serve`` keeps in memory what is in use, not everything that happened.

An idle session nobody is attached to is evicted after ``--idle-evict`` seconds (its frames,
history and provider state leave memory) and comes back from the store on load, replaying
exactly what it replayed while live; a live session keeps only ``--frame-cache-bytes`` of its
finished turns, and a replay that reaches further back reads the rest from the store. Each
test reads the daemon's own counts on ``/metrics`` (live sessions, cached frame bytes).
"""

from __future__ import annotations

from pathlib import Path

from tests.daemon.conftest import KIND, StartDaemon
from tests.daemon.telemetry_daemon import get, http_base, sample
from tests.runtime import scenarios as sc
from tests.support.daemon_process import DaemonProcess
from tests.support.eventually import eventually
from tests.support.message_log import Message
from tests.support.runtime_harness import check_cards, lifecycle, message_text
from toolprep.testing import FakeProviderServer


def _metric(daemon: DaemonProcess, name: str) -> float | None:
    scraped = get(http_base(daemon) + "/metrics", {"Authorization": f"Bearer {daemon.token}"})
    assert scraped.status == 200, scraped
    return sample(scraped.body, name)


def _read_turns(provider: FakeProviderServer, workdir: Path, count: int) -> None:
    """``count`` turns that each read a file (a card that completes) and answer."""
    (workdir / "notes.txt").write_text("kept notes\n")
    for number in range(count):
        call = (f"call_read_{number}", "read_file", {"path": "notes.txt"})
        provider.enqueue(
            sc.ok(sc.calls_turn(KIND, [call], text=f"Reading, turn {number}.")),
            sc.ok(sc.text_turn(KIND, f"Turn {number} read the notes.")),
        )


def _without_prompts(frames: list[Message]) -> list[Message]:
    return [frame for frame in frames if frame["sessionUpdate"] != "user_message_chunk"]


def _run_turns(daemon: DaemonProcess, workdir: Path, count: int) -> tuple[str, list[Message]]:
    """A new session with ``count`` finished turns; its id and what its client was shown."""
    client = daemon.client()
    try:
        session_id = client.start_session(workdir)
        for _ in range(count):
            assert client.result(client.prompt(session_id), timeout=60)["stopReason"] == "end_turn"
        return session_id, client.updates(session_id)
    finally:
        client.close()


def test_an_idle_session_is_evicted_and_loads_back_replaying_the_same_frames(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path, tmp_path: Path
) -> None:
    # A long disconnect grace: what evicts the session is --idle-evict alone.
    daemon = start_daemon(
        "--data-dir", str(tmp_path / "data"), "--workers", "1",
        "--disconnect-grace", "600", "--idle-evict", "0.5",
    )  # fmt: skip
    _read_turns(provider, workdir, 2)
    session_id, shown = _run_turns(daemon, workdir, 2)
    watcher = daemon.loaded(session_id, workdir)  # attached: it is not evicted meanwhile
    try:
        live = watcher.updates(session_id)
        assert _metric(daemon, "toolprep_sessions_live") == 1
    finally:
        watcher.close()
    eventually(lambda: _metric(daemon, "toolprep_sessions_live") == 0, timeout=60)
    assert _metric(daemon, "toolprep_frames_cached_bytes") == 0

    provider.enqueue(sc.ok(sc.text_turn(KIND, "Still here after the eviction.")))
    back = daemon.loaded(session_id, workdir)
    try:
        assert back.updates(session_id) == live
        turn = back.prompt(session_id)
        assert back.result(turn, timeout=60)["stopReason"] == "end_turn"
        after = back.updates(session_id)[len(live) :]
    finally:
        back.close()
    assert message_text(after) == "Still here after the eviction."
    # The history came back too: the provider was sent both earlier turns' reads.
    assert "call_read_1" in str(provider.requests[-1].body)
    assert _without_prompts(live) == shown  # the prompting client is not sent its own words
    check_cards(live)
    assert lifecycle(live) == {
        f"call_read_{n}": ["preparing", "in_progress", "completed"] for n in (0, 1)
    }
    assert daemon.stop() == 0


def test_a_live_session_keeps_its_last_turns_and_replays_the_rest_from_the_store(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path, tmp_path: Path
) -> None:
    turns = 6
    daemon = start_daemon(
        "--data-dir", str(tmp_path / "data"), "--workers", "1",
        "--frame-cache-bytes", "0", "--idle-evict", "600",
    )  # fmt: skip
    _read_turns(provider, workdir, turns)
    client = daemon.client()
    try:
        session_id = client.start_session(workdir)
        for _ in range(turns):
            assert client.result(client.prompt(session_id), timeout=60)["stopReason"] == "end_turn"
        shown = client.updates(session_id)
        cached = _metric(daemon, "toolprep_frames_cached_bytes")
        # Every finished turn is stored, so none is kept: the cache holds less than the
        # turn that is the smallest to encode (here, the last turn's frames)...
        one_turn = len(str(shown)) // turns
        assert cached is not None and cached < one_turn, (cached, one_turn)
        whole = daemon.replayed(session_id, workdir)  # ...and a replay still has all of it
        assert _without_prompts(whole) == shown
        seqs = [frame["_meta"]["toolprep"]["seq"] for frame in whole]
        middle = seqs[len(seqs) // 2]  # in a turn long forgotten from memory
        resumed = daemon.client()
        try:
            resumed.initialize()
            params = {
                "sessionId": session_id,
                "cwd": str(workdir),
                "mcpServers": [],
                "_meta": {"toolprep": {"afterSeq": middle}},
            }
            resumed.result(resumed.request("session/load", params))
            assert resumed.updates(session_id) == whole[len(seqs) // 2 + 1 :]
        finally:
            resumed.close()
    finally:
        client.close()
    check_cards(shown)
    assert daemon.stop() == 0
