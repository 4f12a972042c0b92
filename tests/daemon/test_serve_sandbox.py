"""A daemon's sessions cannot read each other's projects, nor the daemon's token.

``toolprep serve`` with two workers holds two sessions: one in a project, one in
the directory above it (so, were it not hidden, the first project would lie in
plain sight of the second), and its data directory sits inside the second
session's directory too. The second session's command tries the first
project's file, the daemon file and the store, printing them encoded so that
masking could not hide a leak; the sandbox (``--sandbox auto``, the default)
must leave it none of them. A second command in the first project shows the
file was there to be read.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest

from tests.daemon.conftest import KIND, StartDaemon
from tests.runtime import scenarios as sc
from tests.support.runtime_harness import lifecycle
from toolprep.testing import FakeProviderServer

pytestmark = pytest.mark.process

NOTES = "another-project-notes-4be1c9"


def test_a_session_cannot_read_another_sessions_project_or_the_daemon_file(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path
) -> None:
    project = workdir / "project"
    project.mkdir()
    (project / "notes.txt").write_text(NOTES + "\n")
    data = workdir / "data-home" / "toolprep"
    daemon = start_daemon(
        "--allow-shell", "--workers", "2", env_extra={"XDG_DATA_HOME": str(workdir / "data-home")}
    )
    assert daemon.address_file == data / "serve.json"
    look = (
        f"echo B64:$(base64 -w0 project/notes.txt); echo B64:$(base64 -w0 {data}/serve.json); "
        f"ls -a {data}; ls project; echo looked"
    )
    provider.enqueue(
        sc.ok(sc.calls_turn(KIND, [sc.shell("cat notes.txt", "call_own")])),
        sc.ok(sc.text_turn(KIND, "Read.")),
        sc.ok(sc.calls_turn(KIND, [sc.shell(look, "call_look")])),
        sc.ok(sc.text_turn(KIND, "Looked.")),
    )
    client = daemon.client()
    try:
        owner = client.start_session(project)
        assert client.result(client.prompt(owner))["stopReason"] == "end_turn"
        other = client.start_session(workdir)
        assert client.result(client.prompt(other))["stopReason"] == "end_turn"
        updates = client.updates(owner) + client.updates(other)
    finally:
        client.close()
    assert daemon.stop() == 0
    assert lifecycle(updates) == {
        "call_own": ["preparing", "in_progress", "completed"],
        "call_look": ["preparing", "in_progress", "completed"],
    }
    assert NOTES in json.dumps(provider.requests[1].body)  # its own session reads it
    seen = json.dumps(provider.requests[3].body).replace("\\n", "\n")
    assert "looked" in seen
    decoded = [
        base64.b64decode(encoded).decode(errors="replace")
        for encoded in re.findall(r"B64:([A-Za-z0-9+/=]+)", seen)
    ]
    for shown in (seen, *decoded):
        assert NOTES not in shown
        assert daemon.token not in shown
    assert "sessions.db" not in seen  # the data directory looked empty
    assert (data / "sessions.db").exists()  # though the daemon kept its sessions there
