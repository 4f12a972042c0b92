"""``toolprep serve`` holding many connections: a slow client costs only itself, limits are
answered before the WebSocket opens, and a stop does not wait on clients one by one.

Real daemons on real sockets; progress is asserted by counting completed turns
and log lines, never by timing.
"""

from __future__ import annotations

import re
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import orjson
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.daemon.conftest import KIND, StartDaemon
from tests.runtime import scenarios as sc
from tests.support.daemon_process import (
    DaemonProcess,
    daemon_environment,
    refused_start,
)
from tests.support.eventually import eventually
from tests.support.raw_upgrade import address_of, request_bytes, upgrade
from tests.support.runtime_harness import lifecycle, provider_base_url
from tests.support.ws_client import WsClient
from toolprep.runtime.kernel.event_loops import uvloop_installed
from toolprep.testing import FakeProviderServer, ScriptedResponse, anthropic_sse
from toolprep.testing.daemon import serve_command

DEADLINE_S = 60.0  # far above what any of these takes; only a hang comes near it
SEND_BUFFER = 1024 * 1024
BIG_REPLY_BYTES = 16 * 1024 * 1024  # far more than the socket buffers between the two ends


def _poll(condition_met: object, what: str, daemon: DaemonProcess) -> None:
    assert callable(condition_met)

    def met() -> bool:
        assert daemon.process.poll() is None, f"the daemon exited: {daemon.stderr()}"
        return bool(condition_met())

    try:
        eventually(met, timeout=DEADLINE_S, interval=0.05)
    except AssertionError as failure:
        raise AssertionError(f"{what}: not reached; log:\n{daemon.stderr()}") from failure


def _threads_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^Threads:\s+(\d+)$", status, re.M)
    assert found is not None, status
    return int(found[1])


def _stalled_client(daemon: DaemonProcess) -> ClientConnection:
    """A client whose socket reads little and whose library stops reading after one frame
    it was not asked for: once it stops calling ``recv`` the daemon's sends pile up."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)  # no autotuning
    sock.connect(address_of(daemon.url))
    return connect(
        daemon.url,
        sock=sock,
        additional_headers={"Authorization": f"Bearer {daemon.token}"},
        compression=None,
        max_size=None,
        max_queue=1,
        legacy=True,
    )


def _encode(message: dict[str, object]) -> str:
    return orjson.dumps(message).decode()


def _call(client: ClientConnection, request_id: int, method: str, params: object) -> object:
    client.send(_encode({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}))
    while True:
        message = orjson.loads(client.recv(timeout=DEADLINE_S))
        if message.get("id") == request_id:
            assert "result" in message, message
            return message["result"]


def _turn(client: WsClient, session_id: str, provider: FakeProviderServer) -> str:
    provider.enqueue(sc.ok(sc.text_turn(KIND, "fine")))
    stop: str = client.result(client.prompt(session_id), DEADLINE_S)["stopReason"]
    return stop


def test_a_client_that_stops_reading_is_cut_off_and_every_other_session_goes_on(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path
) -> None:
    # One runtime for every session: the thread that writes the stalled client's frames
    # writes everyone's.
    daemon = start_daemon("--no-persist", "--workers", "1", "--max-send-buffer", str(SEND_BUFFER))
    with ExitStack() as stack:
        healthy = [stack.enter_context(_closing(daemon.client())) for _ in range(3)]
        sessions = [client.start_session(workdir) for client in healthy]
        stalled = _stalled_client(daemon)
        stack.callback(stalled.close)
        assert stalled.response is not None
        connection_id = stalled.response.headers["Acp-Connection-Id"]
        _call(stalled, 1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        stalled_session = _call(stalled, 2, "session/new", {"cwd": str(workdir), "mcpServers": []})
        assert isinstance(stalled_session, dict)
        provider.enqueue(
            ScriptedResponse(
                events=anthropic_sse(text="x" * BIG_REPLY_BYTES, fragment_size=32 * 1024)
            )
        )
        stalled.send(
            _encode(
                {
                    "jsonrpc": "2.0",
                    "id": 3,
                    "method": "session/prompt",
                    "params": {
                        "sessionId": stalled_session["sessionId"],
                        "prompt": [{"type": "text", "text": "a long one"}],
                    },
                }
            )
        )
        # From here on the stalled client reads nothing until it is cut off.
        cut_off = re.compile(rf"ws-{connection_id}: the client fell \d+ bytes behind")
        _poll(lambda: cut_off.search(daemon.stderr()), "the stalled client cut off", daemon)
        close = _drain_in_background(stalled)
        # Every other session of the same runtime goes on turning.
        for _ in range(3):
            for client, session_id in zip(healthy, sessions, strict=True):
                assert _turn(client, session_id, provider) == "end_turn"
        close.join(DEADLINE_S)
        assert not close.is_alive(), "the stalled client's socket was never closed"
        assert stalled.close_code == 1008, stalled.close_code
        assert stalled.close_reason == "client too slow: send buffer limit reached"
        # Its session stays with the daemon, for a later attach (resumed: a replay of the
        # whole reply would be over this daemon's small send buffer).
        again = stack.enter_context(_closing(daemon.client()))
        again.initialize()
        resumed = again.load(stalled_session["sessionId"], workdir, "session/resume")
        assert "result" in resumed, resumed
    assert "Traceback" not in daemon.stderr()


def _text_of(updates: list[dict[str, object]]) -> str:
    return "".join(
        str(content["text"])
        for update in updates
        if update["sessionUpdate"] == "agent_message_chunk"
        and isinstance(content := update["content"], dict)
    )


def test_a_replay_larger_than_the_send_buffer_is_paced_not_cut_off(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path
) -> None:
    """``session/load`` of a conversation far larger than ``--max-send-buffer``: the replay
    waits for the client to read rather than filling the buffer at once, so a client
    that reads gets all of it and stays connected."""
    daemon = start_daemon("--no-persist", "--workers", "1", "--max-send-buffer", str(SEND_BUFFER))
    # Each turn live is half the buffer, so the first client is never too slow for it.
    turn_text = "y" * (SEND_BUFFER // 2)
    with _closing(daemon.client()) as first:
        session_id = first.start_session(workdir)
        for _ in range(6):
            events = anthropic_sse(text=turn_text, fragment_size=16 * 1024)
            provider.enqueue(ScriptedResponse(events=events))
            assert first.result(first.prompt(session_id), DEADLINE_S)["stopReason"] == "end_turn"
        reply = _text_of(first.updates(session_id))
        assert reply == turn_text * 6
        with _closing(daemon.client()) as second:
            second.initialize()
            loaded = second.load(session_id, workdir)
            assert "result" in loaded, loaded
            assert _text_of(second.updates(session_id)) == reply
            assert second.close_code is None
            # Still attached: the next turn reaches it live.
            assert _turn(first, session_id, provider) == "end_turn"
            second.wait_for(lambda _: _text_of(second.updates(session_id)).endswith("fine"))
    assert "fell" not in daemon.stderr()


def _drain_in_background(client: ClientConnection) -> threading.Thread:
    def drain() -> None:
        try:
            while True:
                client.recv(timeout=DEADLINE_S)
        except ConnectionClosed:
            pass

    thread = threading.Thread(target=drain, name="drain-stalled", daemon=True)
    thread.start()
    return thread


@contextmanager
def _closing(client: WsClient) -> Iterator[WsClient]:
    try:
        yield client
    finally:
        client.close()


def test_each_upgrade_gets_a_fresh_connection_id_its_log_lines_carry(
    start_daemon: StartDaemon, workdir: Path
) -> None:
    daemon = start_daemon("--no-persist", "--workers", "1", "--log-level", "INFO")
    bearer = ("Authorization", f"Bearer {daemon.token}")
    heads = [upgrade(daemon.url, [bearer]) for _ in range(3)]
    ids = []
    for answer in heads:
        assert answer.status == 101, answer
        found = re.search(rb"\r\nAcp-Connection-Id: ([0-9a-f]{32})\r\n", answer.head + b"\r\n")
        assert found is not None, answer.head
        ids.append(found[1].decode())
    assert len(set(ids)) == 3
    for connection_id in ids:
        _poll(
            lambda cid=connection_id: f"ws-{cid}: disconnected" in daemon.stderr(),
            "the disconnect logged with the connection's id",
            daemon,
        )
        assert f"ws-{connection_id}: connected from" in daemon.stderr()


def test_past_max_connections_an_upgrade_is_refused_503_with_retry_after(
    start_daemon: StartDaemon, workdir: Path
) -> None:
    daemon = start_daemon(
        "--no-persist", "--workers", "1", "--max-connections", "3", "--log-level", "INFO"
    )
    with ExitStack() as stack:
        clients = [stack.enter_context(_closing(daemon.client())) for _ in range(3)]
        for client in clients:
            client.initialize()
        busy = upgrade(daemon.url, [("Authorization", f"Bearer {daemon.token}")])
        assert busy.status == 503, busy
        assert re.search(rb"\r\nRetry-After: \d+\r\n", busy.head + b"\r\n"), busy.head
        assert b"at most 3 connections" in busy.body
        clients[0].close()
        _poll(lambda: daemon.stderr().count(": disconnected") == 1, "a disconnect", daemon)
        back = stack.enter_context(_closing(daemon.client()))
        back.initialize()


def test_threads_do_not_grow_with_connections(start_daemon: StartDaemon, workdir: Path) -> None:
    daemon = start_daemon("--no-persist", "--workers", "1")
    with ExitStack() as stack:
        first = [stack.enter_context(_closing(daemon.client())) for _ in range(10)]
        for client in first:
            client.initialize()
        before = _threads_of(daemon.process.pid)
        more = [stack.enter_context(_closing(daemon.client())) for _ in range(100)]
        for client in more:
            client.initialize()
        after = _threads_of(daemon.process.pid)
    # A thread or two may start for other reasons; a thread per connection would be 100.
    assert after - before < 10, (before, after)


def _silent_upgrade(url: str, token: str) -> socket.socket:
    """An upgraded socket that will never read again, nor answer a close handshake."""
    sock = socket.create_connection(address_of(url), timeout=DEADLINE_S)
    sock.sendall(request_bytes(url, [("Authorization", f"Bearer {token}")]))
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        assert chunk, head
        head += chunk
    assert head.startswith(b"HTTP/1.1 101 "), head
    return sock


SILENT_CLIENTS = 40  # one close handshake after the other, 2 s each, would take 80 s


def test_a_stop_closes_every_connection_within_one_budget(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path
) -> None:
    daemon = start_daemon("--no-persist", "--workers", "1", "--log-level", "INFO")
    provider.enqueue(sc.prepared_then_stall(KIND, ("call_stall", "get_weather", {})))
    with ExitStack() as stack:
        silent = [
            stack.enter_context(_silent_upgrade(daemon.url, daemon.token))
            for _ in range(SILENT_CLIENTS)
        ]
        assert len(silent) == SILENT_CLIENTS
        client = stack.enter_context(_closing(daemon.client()))
        session_id = client.start_session(workdir)
        turn = client.prompt(session_id)
        client.wait_for(lambda _: "call_stall" in lifecycle(client.updates(session_id)))
        assert daemon.stop(DEADLINE_S) == 0
        assert client.result(turn, DEADLINE_S)["stopReason"] == "cancelled"
    stops = re.findall(
        r"stopped serving: (\d+) connection\(s\) closed in [\d.]+ s, (\d+) of them dropped "
        r"after the ([\d.]+) s stop budget",
        daemon.stderr(),
    )
    assert len(stops) == 1, daemon.stderr()
    [(closed, dropped, _budget)] = stops
    assert int(closed) == SILENT_CLIENTS + 1
    assert int(dropped) >= SILENT_CLIENTS  # they never answered: dropped, all at once
    assert "Traceback" not in daemon.stderr()


FD_LIMIT = 128


def _one_turn(daemon: DaemonProcess, provider: FakeProviderServer, workdir: Path) -> None:
    with _closing(daemon.client()) as client:
        assert _turn(client, client.start_session(workdir), provider) == "end_turn"


@pytest.mark.parametrize(
    "event_loop",
    [
        "asyncio",
        pytest.param(
            "uvloop",
            marks=pytest.mark.skipif(not uvloop_installed(), reason="uvloop is not installed"),
        ),
    ],
)
def test_out_of_file_descriptors_the_daemon_backs_off_and_recovers(
    event_loop: str, tmp_path: Path, provider: FakeProviderServer, workdir: Path
) -> None:
    # uvloop's own server would close its listening socket on the first EMFILE; the
    # daemon's accept loop pauses and resumes on either loop.
    limited = (
        "import os, resource, sys; "
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({FD_LIMIT}, {FD_LIMIT})); "
        "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
    )
    command = serve_command(
        KIND,
        provider_base_url(KIND, provider),
        "--no-persist",
        "--workers",
        "1",
        "--max-connections",
        "1000",
        "--event-loop",
        event_loop,
    )
    env = daemon_environment({"XDG_DATA_HOME": str(tmp_path / "data-home")})
    daemon = DaemonProcess(
        [sys.executable, "-c", limited, *command[1:]], env, workdir, tmp_path / "daemon.log"
    )
    try:
        _exhaust_and_recover(daemon, provider, workdir)
    finally:
        daemon.kill()


def _exhaust_and_recover(
    daemon: DaemonProcess, provider: FakeProviderServer, workdir: Path
) -> None:
    _one_turn(daemon, provider, workdir)  # the provider's SDK is loaded before the squeeze
    with ExitStack() as stack:
        held = [
            stack.enter_context(socket.create_connection(address_of(daemon.url), timeout=5))
            for _ in range(FD_LIMIT + 20)
        ]
        assert len(held) == FD_LIMIT + 20
        _poll(
            lambda: "cannot accept connections" in daemon.stderr(),
            "the daemon reports running out of descriptors",
            daemon,
        )
    _one_turn(daemon, provider, workdir)  # the held sockets are closed: it accepts again
    log = daemon.stderr()
    assert "Traceback" not in log, log
    assert log.count("cannot accept connections") <= 3, log  # a line now and then, no storm


def test_connection_options_nothing_could_serve_with_are_refused_at_start(
    workdir: Path,
) -> None:
    assert "--max-connections must be >= 1, got 0" in refused_start(
        workdir, "--max-connections", "0"
    )
    assert "--max-send-buffer must be >= 1 byte, got 0" in refused_start(
        workdir, "--max-send-buffer", "0"
    )
    assert "--ping-timeout must be >= 0 seconds, got -1.0" in refused_start(
        workdir, "--ping-timeout", "-1"
    )
