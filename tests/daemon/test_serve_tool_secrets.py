"""The token ``toolprep serve`` asks of its clients never reaches a tool or the provider.

Whether it came from ``--token-file``, from ``TOOLPREP_TOKEN`` or was made up
by the daemon, and whether the session runs in the daemon or in a worker: a
shell command's ``env`` does not show it, and the daemon's own command line,
which any command can read, never holds it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.daemon.conftest import KIND, StartDaemon
from tests.runtime import scenarios as sc
from tests.support.runtime_harness import lifecycle
from toolprep.testing import FakeProviderServer

TOKEN = "serve-token-toolsecret-6d1f9a2c"
LOOK = "env; echo; tr '\\0' ' ' < /proc/$PPID/cmdline"


@pytest.mark.parametrize(
    ("source", "workers"),
    [("file", "1"), ("variable", "2"), ("generated", "1")],
    ids=["file-in-the-daemon", "variable-in-a-worker", "generated-in-the-daemon"],
)
def test_a_shell_command_never_shows_the_serve_token(
    source: str,
    workers: str,
    start_daemon: StartDaemon,
    provider: FakeProviderServer,
    workdir: Path,
    tmp_path: Path,
) -> None:
    # The command reads the daemon's /proc entries, which a sandboxed one cannot see at all.
    options: tuple[str, ...] = (
        "--no-persist",
        "--allow-shell",
        "--sandbox",
        "off",
        "--workers",
        workers,
    )
    env_extra: dict[str, str] = {}
    if source == "file":
        token_file = tmp_path / "token"
        token_file.write_text(TOKEN + "\n")
        options += ("--token-file", str(token_file))
    elif source == "variable":
        env_extra["TOOLPREP_TOKEN"] = TOKEN
    daemon = start_daemon(*options, env_extra=env_extra)
    token = daemon.token
    assert source == "generated" or token == TOKEN
    shell = ("call_look", "run_shell_command", {"command": LOOK})
    provider.enqueue(sc.ok(sc.calls_turn(KIND, [shell])), sc.ok(sc.text_turn(KIND, "Seen.")))
    client = daemon.client()
    try:
        session_id = client.start_session(workdir)
        assert client.result(client.prompt(session_id))["stopReason"] == "end_turn"
        updates = client.updates(session_id)
    finally:
        client.close()
    assert daemon.stop() == 0
    assert lifecycle(updates) == {"call_look": ["preparing", "in_progress", "completed"]}
    to_model = json.dumps(provider.requests[1].body)
    assert "toolprep.runtime" in to_model  # the command line was read
    for seen_by in (to_model, json.dumps(updates)):
        assert token not in seen_by
        assert "TOOLPREP_TOKEN" not in seen_by
