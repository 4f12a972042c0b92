"""``toolprep serve``'s front door, attacked the way a web page or a broken client would.

One real daemon (``--allow-origin https://editor.example``) takes hand-written
upgrade requests over a real socket: browsers' ``Origin`` headers, rebound
``Host`` names, malformed ``Authorization`` headers, clients that leave in
the middle of the handshake. Each test ends with a legitimate client running
a prompt, so every refusal is shown to cost the other clients nothing.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.conftest import KIND
from tests.runtime import scenarios as sc
from tests.support.daemon_process import DaemonProcess, daemon_environment
from tests.support.eventually import eventually
from tests.support.raw_upgrade import address_of, request_bytes, upgrade
from tests.support.runtime_harness import message_text, provider_base_url
from toolprep.testing import FakeProviderServer
from toolprep.testing.daemon import serve_command

ALLOWED = "https://editor.example"
DEADLINE_S = 30.0


class Door:
    """The daemon under attack, its provider and a working directory for sessions."""

    def __init__(self, daemon: DaemonProcess, provider: FakeProviderServer, workdir: Path) -> None:
        self.daemon, self.provider, self.workdir = daemon, provider, workdir
        _, self.port = address_of(daemon.url)

    def bearer(self) -> tuple[str, str]:
        return ("Authorization", f"Bearer {self.daemon.token}")

    def threads(self) -> int:
        return len(os.listdir(f"/proc/{self.daemon.process.pid}/task"))

    def serves_a_prompt(self, text: str) -> None:
        """A legitimate client: initialize, session/new, a prompt answered in full."""
        self.provider.enqueue(sc.ok(sc.text_turn(KIND, text)))
        client = self.daemon.client()
        try:
            session_id = client.start_session(self.workdir)
            assert client.result(client.prompt(session_id))["stopReason"] == "end_turn"
            assert message_text(client.updates(session_id)) == text
        finally:
            client.close()

    def logged_no_failure(self) -> None:
        said = self.daemon.stderr()
        for failure in (
            "Traceback",
            "handler failed",
            "process_request failed",
            "handshake failed",
        ):
            assert failure not in said, said


@pytest.fixture(scope="module")
def door(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Door]:
    root = tmp_path_factory.mktemp("front-door")
    workdir = root / "work"
    workdir.mkdir()
    with FakeProviderServer() as provider:
        command = serve_command(
            KIND,
            provider_base_url(KIND, provider),
            "--no-persist",
            "--workers",
            "1",
            "--allow-origin",
            ALLOWED,
        )
        env = daemon_environment({"XDG_DATA_HOME": str(root / "data-home")})
        daemon = DaemonProcess(command, env, workdir, root / "daemon.log")
        try:
            yield Door(daemon, provider, workdir)
            assert daemon.stop() == 0
        finally:
            daemon.kill()


@pytest.mark.parametrize(
    "origins",
    [
        ["null"],
        ["https://evil.example"],
        ["http://127.0.0.1"],
        ["http://localhost:8080"],
        ["https://editor.example.evil.example"],
        ["https://editor.example:444"],
        ["http://editor.example"],
        [ALLOWED, "https://evil.example"],
        [ALLOWED, ALLOWED],
        ["https://editor.example/../"],
    ],
)
def test_a_browser_page_is_refused_with_403_even_with_the_token(
    door: Door, origins: list[str]
) -> None:
    answer = upgrade(door.daemon.url, [door.bearer(), *(("Origin", o) for o in origins)])
    assert answer.status == 403, answer
    assert b"web pages may not connect" in answer.body
    door.serves_a_prompt("Pages stay out.")


def test_an_allowed_origin_gets_in_only_with_the_token(door: Door) -> None:
    assert upgrade(door.daemon.url, [("Origin", ALLOWED)]).status == 401
    assert upgrade(door.daemon.url, [door.bearer(), ("Origin", ALLOWED)]).status == 101
    assert upgrade(door.daemon.url, [door.bearer(), ("Origin", ALLOWED + "/")]).status == 101
    assert upgrade(door.daemon.url, [door.bearer(), ("Origin", ALLOWED.upper())]).status == 101
    door.serves_a_prompt("Editor page served.")


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:{port}",
        "localhost.evil.example:{port}",
        "127.0.0.1.nip.io:{port}",
        "0.0.0.0:{port}",
        "192.168.1.10:{port}",
        "localhost:{port}:{port}",
        "localhost:http",
        "[::1:{port}",
        "127.0.0.1\xe9",
    ],
)
def test_a_host_that_is_not_a_loopback_name_is_refused(door: Door, host: str) -> None:
    answer = upgrade(
        door.daemon.url, [door.bearer()], host=host.format(port=door.port).encode("latin-1")
    )
    assert answer.status in (400, 421), answer
    door.serves_a_prompt("Rebinding refused.")


def test_a_missing_or_doubled_host_is_refused(door: Door) -> None:
    assert upgrade(door.daemon.url, [door.bearer()], host=b"").status in (400, 421)
    doubled = [door.bearer(), ("Host", "evil.example")]
    assert upgrade(door.daemon.url, doubled).status in (400, 421)
    door.serves_a_prompt("One Host only.")


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "localhost:{port}",
        "LocalHost:{port}",
        "127.0.0.1",
        "127.0.0.1:{port}",
        "127.8.9.10:{port}",
        "[::1]",
        "[::1]:{port}",
    ],
)
def test_loopback_names_are_served(door: Door, host: str) -> None:
    answer = upgrade(door.daemon.url, [door.bearer()], host=host.format(port=door.port))
    assert answer.status == 101, answer


@pytest.mark.parametrize(
    ("headers", "statuses"),
    [
        ([], (401,)),
        ([("Authorization", "Bearer wrong")], (401,)),
        ([("Authorization", "Bearer")], (401,)),
        ([("Authorization", "Basic dXNlcjpwYXNz")], (401,)),
        ([("Authorization", "{token}")], (401,)),
        ([("Authorization", "Bearer {token}"), ("Authorization", "Bearer {token}")], (400, 401)),
        ([("Authorization", "Bearer wrong"), ("Authorization", "Bearer {token}")], (400, 401)),
        ([("Authorization", b"Bearer \xe9\xff")], (400, 401)),
        ([("Authorization", b"Bearer {token}\xe9")], (400, 401)),
        ([("Authorization", b"\xc3\xa9 {token}")], (400, 401)),
    ],
)
def test_a_malformed_authorization_gets_400_or_401_and_no_traceback(
    door: Door, headers: list[tuple[str, str | bytes]], statuses: tuple[int, ...]
) -> None:
    token = door.daemon.token
    filled = [
        (
            name,
            value.replace(b"{token}", token.encode())
            if isinstance(value, bytes)
            else value.format(token=token),
        )
        for name, value in headers
    ]
    answer = upgrade(door.daemon.url, filled)
    assert answer.status in statuses, answer
    door.logged_no_failure()
    door.serves_a_prompt("Auth refused cleanly.")


def test_the_bearer_scheme_is_case_insensitive(door: Door) -> None:
    lower = ("Authorization", f"bearer {door.daemon.token}")
    assert upgrade(door.daemon.url, [lower]).status == 101


def _leave_before_sending(door: Door) -> None:
    with socket.create_connection(address_of(door.daemon.url), timeout=DEADLINE_S):
        pass


def _leave_mid_request(door: Door) -> None:
    request = request_bytes(door.daemon.url, [door.bearer()])
    with socket.create_connection(address_of(door.daemon.url), timeout=DEADLINE_S) as sock:
        sock.sendall(request[: len(request) // 2])


def _leave_before_the_answer(door: Door) -> None:
    request = request_bytes(door.daemon.url, [door.bearer()])
    with socket.create_connection(address_of(door.daemon.url), timeout=DEADLINE_S) as sock:
        sock.sendall(request)


def _leave_right_after_101(door: Door) -> None:
    assert upgrade(door.daemon.url, [door.bearer()]).status == 101


def _reset_right_after_101(door: Door) -> None:
    request = request_bytes(door.daemon.url, [door.bearer()])
    with socket.create_connection(address_of(door.daemon.url), timeout=DEADLINE_S) as sock:
        sock.sendall(request)
        assert sock.recv(65536).startswith(b"HTTP/1.1 101 ")
        # Linger 0: the close sends a reset instead of a FIN.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def test_clients_that_leave_during_or_right_after_the_handshake_cost_nothing(door: Door) -> None:
    door.serves_a_prompt("Warm.")  # whatever the first connection starts for good is started
    baseline = door.threads()
    leavers = (
        _leave_before_sending,
        _leave_mid_request,
        _leave_before_the_answer,
        _leave_right_after_101,
        _reset_right_after_101,
    )
    for _ in range(10):
        for leave in leavers:
            leave(door)
    eventually(lambda: door.threads() <= baseline, timeout=DEADLINE_S, interval=0.05)
    assert door.threads() <= baseline, f"{door.threads()} threads, {baseline} before"
    door.logged_no_failure()
    door.serves_a_prompt("Next client served.")
