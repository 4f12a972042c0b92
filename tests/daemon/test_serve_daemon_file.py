"""``toolprep serve`` publishes its address and token in ``serve.json``, for its user only.

The real daemon writes the file; the tests read it as a client of the same
user would (plain JSON, and ``read_daemon_file``), check who may read it,
connect with what it says, and see it removed at a clean exit only by the
daemon it names.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.daemon.conftest import KIND, StartDaemon
from tests.runtime import scenarios as sc
from tests.support.daemon_process import DaemonProcess
from tests.support.raw_upgrade import upgrade
from tests.support.runtime_harness import message_text, provider_base_url
from toolprep.runtime.daemon.discovery import (
    DaemonAddress,
    DaemonFileError,
    read_daemon_file,
)
from toolprep.runtime.daemon.runs_with import RunsWith, key_check
from toolprep.runtime.hosting.model_routes import DEFAULT_MODELS
from toolprep.testing import FakeProviderServer


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _serves_a_prompt(daemon: DaemonProcess, provider: FakeProviderServer, workdir: Path) -> None:
    provider.enqueue(sc.ok(sc.text_turn(KIND, "Found it.")))
    client = daemon.client()
    try:
        session_id = client.start_session(workdir)
        assert client.result(client.prompt(session_id))["stopReason"] == "end_turn"
        assert message_text(client.updates(session_id)) == "Found it."
    finally:
        client.close()


@pytest.mark.parametrize("persist", [False, True])
def test_the_address_and_a_random_token_are_published_for_this_user_only(
    start_daemon: StartDaemon,
    provider: FakeProviderServer,
    workdir: Path,
    tmp_path: Path,
    persist: bool,
) -> None:
    if persist:
        data_dir = tmp_path / "data"
        daemon = start_daemon("--data-dir", str(data_dir), "--workers", "1")
    else:  # the default data directory all the same: clients look there
        data_dir = tmp_path / "data-home" / "toolprep"
        daemon = start_daemon("--no-persist", "--workers", "1")
    path = data_dir / "serve.json"
    assert daemon.address_file == path
    assert _mode(path) == 0o600
    if not persist:
        assert _mode(data_dir) == 0o700
    written = json.loads(path.read_text(encoding="utf-8"))
    assert written.keys() == {"url", "token", "pid", "runs_with"}
    assert written["url"] == daemon.url and written["pid"] == daemon.process.pid
    assert len(written["token"]) >= 43  # 32 random bytes
    # What its sessions stream from; its key only as a check keyed with its token.
    runs_with = RunsWith(
        KIND,
        DEFAULT_MODELS[KIND],
        provider_base_url(KIND, provider),
        key_check("test-key", daemon.token),
    )
    assert "test-key" not in path.read_text(encoding="utf-8")
    assert read_daemon_file(data_dir) == DaemonAddress(
        daemon.url, daemon.token, written["pid"], runs_with
    )
    assert not [name for name in os.listdir(data_dir) if name.startswith(".serve.json")]
    command_line = Path(f"/proc/{daemon.process.pid}/cmdline").read_bytes()
    assert daemon.token.encode() not in command_line

    assert upgrade(daemon.url).status == 401
    _serves_a_prompt(daemon, provider, workdir)
    assert daemon.stop() == 0
    assert not path.exists()


def test_each_daemon_has_its_own_token_and_removes_only_the_file_that_names_it(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path, tmp_path: Path
) -> None:
    path = tmp_path / "data-home" / "toolprep" / "serve.json"
    first = start_daemon("--no-persist", "--workers", "1")
    second = start_daemon("--data-dir", str(tmp_path / "other"), "--workers", "1")
    assert first.token != second.token
    assert upgrade(second.url, [("Authorization", f"Bearer {first.token}")]).status == 401
    # Its file replaced by one it did not write (another daemon's, copied by hand).
    path.write_bytes(second.address_file.read_bytes())
    assert first.stop() == 0
    assert json.loads(path.read_text(encoding="utf-8"))["pid"] == second.process.pid
    _serves_a_prompt(second, provider, workdir)
    assert second.stop() == 0
    assert not second.address_file.exists()


def test_reading_no_file_or_a_foreign_one_says_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(DaemonFileError, match=r"no daemon file at .*: is toolprep serve running\?"):
        read_daemon_file(tmp_path)
    (tmp_path / "serve.json").write_text("{not json")
    with pytest.raises(DaemonFileError, match="is not JSON"):
        read_daemon_file(tmp_path)
    for foreign in ({"url": "ws://x/acp", "token": "", "pid": 1}, {"url": "ws://x/acp"}, [1]):
        (tmp_path / "serve.json").write_text(json.dumps(foreign))
        with pytest.raises(DaemonFileError, match="does not hold a url, a token and a pid"):
            read_daemon_file(tmp_path)
