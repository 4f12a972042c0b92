"""The token ``toolprep serve`` asks of its clients never reaches a tool or the provider.

Whether it came with ``--token`` or in ``TOOLPREP_TOKEN``, and whether the
session runs in the daemon or in a worker: a shell command's ``env`` does
not show it, and where a command can still read it (the daemon's own
command line) it is masked before the output goes anywhere.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.daemon.conftest import KIND, StartDaemon
from tests.runtime import scenarios as sc
from tests.support.fake_provider import FakeProviderServer
from tests.support.runtime_harness import lifecycle

TOKEN = "serve-token-toolsecret-6d1f9a2c"
LOOK = "env; echo; tr '\\0' ' ' < /proc/$PPID/cmdline"


@pytest.mark.parametrize(
    ("options", "env_extra"),
    [(("--workers", "1", "--token", TOKEN), {}), (("--workers", "2"), {"TOOLPREP_TOKEN": TOKEN})],
    ids=["option-in-the-daemon", "variable-in-a-worker"],
)
def test_a_shell_command_never_shows_the_serve_token(
    options: tuple[str, ...],
    env_extra: dict[str, str],
    start_daemon: StartDaemon,
    provider: FakeProviderServer,
    workdir: Path,
) -> None:
    daemon = start_daemon("--no-persist", "--allow-shell", *options, env_extra=env_extra)
    shell = ("call_look", "run_shell_command", {"command": LOOK})
    provider.enqueue(sc.ok(sc.calls_turn(KIND, [shell])), sc.ok(sc.text_turn(KIND, "Seen.")))
    client = daemon.client(TOKEN)
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
        assert TOKEN not in seen_by
        assert "TOOLPREP_TOKEN" not in seen_by
    if "--token" in options:
        assert "--token [redacted]" in to_model
