"""``toolprep serve`` with no key: every session of every editor gets the whole scripted turn.

The daemon serves all its editors from one replay provider, so this is where sessions
with the same prompt meet most: at once from two editors, then one after another.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.acp.test_replay_sessions import README_PROMPT, assert_whole_turn, project
from tests.support.daemon_process import DaemonProcess
from tests.support.ws_client import WsClient


def test_keyless_daemon_plays_each_session_its_own_turn(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.pop("TOOLPREP_TOKEN", None)
    env["XDG_DATA_HOME"] = str(tmp_path / "data-home")
    command = [sys.executable, "-m", "toolprep.runtime.cli", "serve", "--port", "0"]
    daemon = DaemonProcess([*command, "--no-persist"], env, tmp_path, tmp_path / "daemon.log")
    editors = [daemon.client(), daemon.client()]
    try:
        for editor in editors:
            editor.initialize()
        opened: list[tuple[WsClient, str]] = []
        for round_ in range(2):
            prompts = []
            for n, editor in enumerate(editors):
                cwd = project(tmp_path, f"editor-{n}-round-{round_}")
                session_id = editor.start_session(cwd)
                prompts.append((editor, editor.prompt(session_id, README_PROMPT)))
                opened.append((editor, session_id))
            for editor, request_id in prompts:
                assert editor.result(request_id, timeout=120)["stopReason"] == "end_turn"
        for editor, session_id in opened:
            assert_whole_turn(editor.updates(session_id))
    finally:
        for editor in editors:
            editor.close()
        try:
            assert daemon.stop() == 0
        finally:
            daemon.kill()
