"""``toolprep connect`` gives nothing to a program that cannot prove the daemon's token, and
trusts only a ``serve.json`` nobody else could have written.

A squatter is another local user (uid 65534 through ``setpriv`` when the
suite runs as root; the same uid otherwise, which without the token can
prove nothing either) listening on the port a dead daemon's ``serve.json``
still names. It accepts WebSocket upgrades, answers them with a made-up
proof, and records every byte it receives. The real ``connect`` must send
it neither the token nor any editor message, remove the stale file, and
with ``--start`` serve the editor from a genuine new daemon. Planted,
foreign, FIFO, device and oversized daemon files are each refused with one
line, before anything reads or waits on them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import orjson
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.daemon.conftest import KIND, StartDaemon
from tests.runtime import scenarios as sc
from tests.support.agent_process import AgentProcess, connect_command
from tests.support.daemon_process import daemon_environment, stop_started_daemons
from tests.support.processes import gone_within
from tests.support.raw_upgrade import address_of
from tests.support.runtime_harness import message_text, provider_base_url
from toolprep.runtime.daemon.daemon_proof import BridgeChallenge
from toolprep.runtime.daemon.discovery import (
    MAX_DAEMON_FILE_BYTES,
    DaemonAddress,
    read_daemon_file,
    write_daemon_file,
)
from toolprep.testing import FakeProviderServer

SquatterAnswer = Literal["fake-upgrade", "not-websocket"]

_SQUATTER = r"""
import base64, hashlib, socket, sys, threading
port, answer = int(sys.argv[1]), sys.argv[2]
listener = socket.create_server(("127.0.0.1", port))
out, lock = sys.stdout, threading.Lock()

def record(data, where):
    with lock:
        out.write(where + data.hex() + "\n")
        out.flush()

def serve(conn):
    with conn:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(65536)
            if not chunk:
                return
            record(chunk, "head:")
            head += chunk
        if answer == "not-websocket":
            conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
        else:
            key = b""
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"sec-websocket-key":
                    key = value.strip()
            guid = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
            accept = base64.b64encode(hashlib.sha1(key + guid).digest())
            conn.sendall(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n"
                b"Toolprep-Challenge: " + b"A" * 43 + b"\r\n"
                b"Toolprep-Daemon-Url: ws://127.0.0.1:%d/acp\r\n" % port
                + b"Toolprep-Proof: " + b"0" * 64 + b"\r\n\r\n"
            )
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                return
            record(chunk, "after:")

print("listening", flush=True)
while True:
    conn, _ = listener.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""


def _as_another_user() -> list[str]:
    """The prefix that runs a command as uid 65534 when this process may switch to it."""
    if os.geteuid() == 0:
        return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    return []


class Squatter:
    """The squatting program on ``port``; ``received()`` stops it and returns every byte,
    the upgrade requests' heads and what came after them (nothing, from a bridge that checks
    the proof: not even a close frame)."""

    def __init__(self, port: int, answer: SquatterAnswer) -> None:
        interpreter = os.path.realpath(sys.executable)
        self.process = subprocess.Popen(
            [*_as_another_user(), interpreter, "-I", "-S", "-c", _SQUATTER, str(port), answer],
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        ready = self.process.stdout.readline()
        assert ready == "listening\n", f"the squatter did not listen on {port}: {ready!r}"

    def received(self) -> tuple[bytes, bytes]:
        self.process.kill()
        out, _ = self.process.communicate(timeout=60)
        parts: dict[str, bytes] = {"head": b"", "after": b""}
        for line in out.split():
            where, _, data = line.partition(":")
            parts[where] += bytes.fromhex(data)
        return parts["head"], parts["after"]


class Setting:
    """A data directory whose daemon was started by ``connect --start`` and then killed, its
    ``serve.json`` left behind; the editors opened on it, and the daemons they start."""

    def __init__(self, tmp_path: Path, workdir: Path, provider: FakeProviderServer) -> None:
        self.tmp, self.workdir, self.provider = tmp_path, workdir, provider
        self.data = tmp_path / "data"
        self.editors: list[AgentProcess] = []
        self.squatters: list[Squatter] = []

    def connect(self, *options: str) -> AgentProcess:
        base_url = provider_base_url(KIND, self.provider)
        serve = ["--workers", "1", "--max-retries", "0", "--provider", KIND, "--base-url", base_url]
        daemon_options = ["--", *serve] if "--start" in options else []
        editor = AgentProcess(
            connect_command("--data-dir", str(self.data), *options, *daemon_options),
            daemon_environment(),
            self.workdir,
            self.tmp / f"connect-{len(self.editors)}.log",
        )
        self.editors.append(editor)
        return editor

    def killed_daemon(self) -> DaemonAddress:
        """Start a daemon through ``connect --start``, then SIGKILL it: its address."""
        first = self.connect("--start")
        first.initialize()
        first.kill()
        daemon = read_daemon_file(self.data)
        os.kill(daemon.pid, signal.SIGKILL)
        assert gone_within(daemon.pid, 60)
        assert read_daemon_file(self.data) == daemon  # left behind
        return daemon

    def squat(self, port: int, answer: SquatterAnswer) -> Squatter:
        squatter = Squatter(port, answer)
        self.squatters.append(squatter)
        return squatter

    def close(self) -> None:
        for editor in self.editors:
            editor.kill()
        for squatter in self.squatters:
            if squatter.process.poll() is None:
                squatter.received()
        stop_started_daemons(self.data)


@pytest.fixture
def setting(tmp_path: Path, workdir: Path, provider: FakeProviderServer) -> Iterator[Setting]:
    made = Setting(tmp_path, workdir, provider)
    try:
        yield made
    finally:
        made.close()


def _one_line(editor: AgentProcess) -> str:
    """What ``connect`` said when it refused: exactly one line, no traceback."""
    assert editor.wait_exit() == 2
    said = editor.stderr()
    assert said.count("\n") == 1 and said.startswith("toolprep connect: "), said
    assert "Traceback" not in said
    return said


def _served_by_a_new_daemon(setting: Setting, old: DaemonAddress) -> None:
    """``connect --start`` answers the editor from a daemon it started: a prompt goes through."""
    editor = setting.connect("--start")
    session_id = editor.start_session(setting.workdir)
    setting.provider.enqueue(sc.ok(sc.text_turn(KIND, "A genuine daemon.")))
    assert editor.result(editor.prompt(session_id))["stopReason"] == "end_turn"
    assert message_text(editor.updates(session_id)) == "A genuine daemon."
    new = read_daemon_file(setting.data)
    assert new.pid != old.pid and new.url != old.url
    assert editor.stderr().startswith(f"toolprep connect: started toolprep serve (pid {new.pid})")


def _nothing_but_challenges_in(received: tuple[bytes, bytes], token: str) -> None:
    head, after = received
    assert token.encode() not in head
    assert b"Authorization" not in head
    assert after == b"", "the bridge sent a listener that gave no proof more than its upgrade"


def test_a_squatter_on_a_dead_daemons_port_gets_nothing_and_start_starts_a_new_daemon(
    setting: Setting,
) -> None:
    old = setting.killed_daemon()
    stale = (setting.data / "serve.json").read_bytes()
    squatter = setting.squat(address_of(old.url)[1], "fake-upgrade")

    alone = setting.connect()
    alone.close_input()
    said = _one_line(alone)
    assert said == (
        f"toolprep connect: the daemon named in {setting.data}/serve.json (pid {old.pid}) is "
        f"not running: removed that stale file (start it with `toolprep serve --data-dir "
        f"{setting.data}`, or pass --start)\n"
    )
    assert not (setting.data / "serve.json").exists()

    (setting.data / "serve.json").write_bytes(stale)  # left behind again, for --start
    (setting.data / "serve.json").chmod(0o600)
    _served_by_a_new_daemon(setting, old)
    _nothing_but_challenges_in(squatter.received(), old.token)


@pytest.mark.parametrize("answer", ["fake-upgrade", "not-websocket"])
def test_a_listener_that_cannot_prove_the_token_gets_no_token_and_no_editor_message(
    setting: Setting, answer: SquatterAnswer
) -> None:
    old = setting.killed_daemon()
    squatter = setting.squat(address_of(old.url)[1], answer)
    # The dead daemon's pid now names a live process: the squatter, as a reused pid would.
    reused = DaemonAddress(old.url, old.token, squatter.process.pid, old.runs_with)
    write_daemon_file(setting.data, reused)

    alone = setting.connect()
    alone.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    said = _one_line(alone)
    assert said.startswith(
        f"toolprep connect: the program listening at {old.url} did not prove it is the daemon "
        f"named in {setting.data}/serve.json ("
    ), said
    assert said.endswith(
        "); nothing was sent to it: removed that stale file (start it with `toolprep serve "
        f"--data-dir {setting.data}`, or pass --start)\n"
    ), said
    assert not (setting.data / "serve.json").exists()

    write_daemon_file(setting.data, reused)
    _served_by_a_new_daemon(setting, old)
    received = squatter.received()
    assert received[0].count(b"Toolprep-Challenge: ") == 2  # both connects reached it, and...
    _nothing_but_challenges_in(received, old.token)  # ...sent it nothing else


Planted = Literal["world-writable directory", "another owner", "fifo", "device link", "oversized"]


def _plant(data: Path, how: Planted, squatter_url: str) -> str:
    """Put a daemon file in ``data`` the way ``how`` says; what the refusal must name."""
    path = data / "serve.json"
    address = DaemonAddress(squatter_url, "planted-token", os.getpid())
    match how:
        case "world-writable directory":
            write_daemon_file(data, address)
            data.chmod(0o777)
            return f"the data directory {data} is writable by other users (mode 0777)"
        case "another owner":
            if os.geteuid() == 0:
                write_daemon_file(data, address)
                os.chown(path, 65534, 65534)
            else:  # `_in_place_of` mounts a file of root's over it, seen as uid 65534
                path.touch(mode=0o600)
            return f"{path} belongs to uid 65534, not to this user (uid 0)"
        case "fifo":
            os.mkfifo(path, 0o600)
            return f"{path} is a FIFO, not the file toolprep serve writes"
        case "device link":
            path.symlink_to("/dev/zero")
            return f"{path} is a symbolic link, not the file toolprep serve writes"
        case "oversized":
            path.write_bytes(b" " * (MAX_DAEMON_FILE_BYTES + 1))
            path.chmod(0o600)
            return f"{path} holds {MAX_DAEMON_FILE_BYTES + 1} bytes, more than a daemon file's"


def _in_place_of(how: Planted, path: Path) -> list[str]:
    """The prefix ``connect`` runs under for ``how``. Only root can give a file to another
    user; a user shows ``connect`` one all the same: in a user namespace of its own, where
    this user is uid 0 and real root's files belong to the overflow uid 65534, it mounts
    ``/etc/passwd`` over ``path``."""
    if how != "another owner" or os.geteuid() == 0:
        return []
    mount = 'mount --bind /etc/passwd "$1" && shift && exec "$@"'
    return ["unshare", "--map-root-user", "--mount", "sh", "-c", mount, "sh", str(path)]


@contextlib.contextmanager
def _listening() -> Iterator[str]:
    """A socket of this process listening on a free loopback port: its ``ws://`` URL, which
    a planted file names (the old ``connect`` would have sent its token there)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield f"ws://127.0.0.1:{listener.getsockname()[1]}/acp"


@pytest.mark.parametrize(
    "how", ["world-writable directory", "another owner", "fifo", "device link", "oversized"]
)
@pytest.mark.parametrize("start", [False, True], ids=["connect", "connect --start"])
def test_a_daemon_file_someone_else_could_have_written_is_refused_with_one_line(
    tmp_path: Path, workdir: Path, how: Planted, start: bool
) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    with _listening() as url:
        named = _plant(data, how, url)
        done = subprocess.run(
            [
                *_in_place_of(how, data / "serve.json"),
                *connect_command("--data-dir", str(data), *(["--start"] if start else [])),
            ],
            input=b"",
            capture_output=True,
            cwd=workdir,
            env=daemon_environment(),
            timeout=60,  # only a hang fails here
        )
    said = done.stderr.decode()
    assert done.returncode == 2, said
    assert done.stdout == b""
    assert said.count("\n") == 1 and said.startswith(f"toolprep connect: {named}"), said
    assert "Traceback" not in said
    assert os.path.lexists(data / "serve.json"), "the user's to look at, not connect's to remove"
    assert not (data / "serve.log").exists(), "--start started a daemon over it"


def test_a_challenging_client_must_prove_the_token_before_any_message_reaches_a_session(
    start_daemon: StartDaemon,
) -> None:
    daemon = start_daemon("--no-persist", "--workers", "1")
    initialize = orjson.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}
    )
    for first in (initialize, b"0" * 64):  # no proof at all, then a wrong one
        challenge = BridgeChallenge.fresh(daemon.token)
        with connect(
            daemon.url, additional_headers=challenge.request_headers(), open_timeout=30
        ) as socket:
            assert socket.response is not None
            challenge.answer(socket.response.headers, daemon.url)  # the daemon's proof holds
            socket.send(first)
            with pytest.raises(ConnectionClosed) as closed:
                socket.recv(timeout=30)
        assert closed.value.rcvd is not None
        assert closed.value.rcvd.code == 1008
        assert closed.value.rcvd.reason == "wrong proof of the token"
    wrong = BridgeChallenge.fresh("not-the-token")
    with connect(daemon.url, additional_headers=wrong.request_headers(), open_timeout=30) as ws:
        assert ws.response is not None
        with pytest.raises(ValueError, match="its proof of the token is wrong"):
            wrong.answer(ws.response.headers, daemon.url)
    assert daemon.stop() == 0
