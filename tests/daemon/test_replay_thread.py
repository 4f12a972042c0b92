"""``toolprep serve``: loading a live session replays the whole conversation from memory.

The daemon keeps a live session's frames in memory (``FrameHistory``), not
read back from the store, so this is the replay path of a second editor
window that opens a session the first one is still using: it must show the
same thread, prompts included, and the prompts the first client sends later
reach it live, while the first client is never sent its own prompts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.daemon.conftest import StartDaemon
from tests.support.conversation import PROMPTS, check_shown, enqueue_answers, run_prompt
from tests.support.thread_rebuilder import ThreadRebuilder
from toolprep.testing import FakeProviderServer


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_live_session_loaded_by_a_second_client_shows_the_whole_thread(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path, workers: str
) -> None:
    daemon = start_daemon("--no-persist", "--allow-shell", "--workers", workers)
    enqueue_answers(provider)
    first, second = daemon.client(), daemon.client()
    try:
        session_id = first.start_session(workdir)
        shown = ThreadRebuilder()
        for prompt in PROMPTS[:2]:
            run_prompt(first, session_id, prompt, shown)

        second.initialize()
        assert "result" in second.load(session_id, workdir)
        # Replayed before the load's reply: the finished turns, prompts first.
        replayed = ThreadRebuilder().apply_all(second.updates(session_id))
        assert replayed.turns == shown.turns

        run_prompt(first, session_id, PROMPTS[2], shown)
        check_shown(shown)
        sent = first.updates(session_id)
        assert not [u for u in sent if u["sessionUpdate"] == "user_message_chunk"]
        # The second client gets the third prompt too, live, and so every prompt's blocks.
        blocks = sum(len(prompt) for prompt in PROMPTS)
        second.wait_for(lambda _: len(second.updates(session_id)) >= len(sent) + blocks)
        assert ThreadRebuilder().apply_all(second.updates(session_id)).turns == shown.turns
    finally:
        first.close()
        second.close()
    assert daemon.stop() == 0
