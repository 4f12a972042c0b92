"""Fixtures that put a real ``JsonRpcConnection`` on real OS pipes.

``RawPeer`` is the other end written by hand (bytes in, parsed lines out), so
tests can send what no well-behaved client would: broken JSON, oversized
lines, bad ids. ``linked`` joins two connections back to back, the way an
editor and the agent talk, for round trips in both directions.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson
import pytest

from toolprep.runtime.acp.jsonrpc_connection import JsonRpcConnection

TIMEOUT = 30.0  # only ever reached by a hung test: generous for a busy machine
ECHO_AGENT = Path(__file__).with_name("echo_agent.py")
REPO_ROOT = Path(__file__).resolve().parents[2]


class RawPeer:
    """The far end of a connection: writes raw bytes, collects every line it is sent."""

    def __init__(self, to_conn: IO[bytes], from_conn: IO[bytes]) -> None:
        self.to_conn = to_conn
        self.from_conn = from_conn
        self.raw_lines: list[bytes] = []
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._write_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="raw-peer", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            for line in self.from_conn:
                self.raw_lines.append(line)
                self._lines.put(line)
        except (OSError, ValueError):
            pass
        self._lines.put(None)

    def write(self, data: bytes) -> None:
        with self._write_lock:
            self.to_conn.write(data)
            self.to_conn.flush()

    def send(self, message: Any) -> None:
        self.write(orjson.dumps(message) + b"\n")

    def recv(self, timeout: float = TIMEOUT) -> dict[str, Any]:
        line = self._lines.get(timeout=timeout)
        assert line is not None, "connection closed its output"
        assert line.endswith(b"\n")
        message = orjson.loads(line)
        assert isinstance(message, dict)
        return message

    def at_eof(self, timeout: float = TIMEOUT) -> bool:
        return self._lines.get(timeout=timeout) is None

    def join(self) -> None:
        self._reader.join(TIMEOUT)

    def close_input(self) -> None:
        """EOF for the connection under test."""
        with self._write_lock:
            self.to_conn.close()


def pipe_pair(*, unbuffered_input: bool = False) -> tuple[IO[bytes], IO[bytes]]:
    read_fd, write_fd = os.pipe()
    reader = os.fdopen(read_fd, "rb", buffering=0 if unbuffered_input else -1)
    return reader, os.fdopen(write_fd, "wb")


@dataclass
class Wired:
    conn: JsonRpcConnection
    peer: RawPeer


def _close_quietly(*streams: IO[bytes]) -> None:
    for stream in streams:
        with contextlib.suppress(OSError):
            stream.close()


WireFactory = Callable[..., Wired]


def _join_reader(conn: JsonRpcConnection) -> None:
    """Wait for the reader thread, so its input is not closed under a blocked read."""
    reader = conn._reader
    if reader is not None:
        reader.join(TIMEOUT)


@pytest.fixture
def wire() -> Iterator[WireFactory]:
    """``wire(**conn_kwargs)``: a started connection and the raw peer facing it."""
    made: list[tuple[JsonRpcConnection, RawPeer, tuple[IO[bytes], IO[bytes], IO[bytes]]]] = []

    def make(*, unbuffered_input: bool = False, start: bool = True, **kwargs: Any) -> Wired:
        conn_in, peer_out = pipe_pair(unbuffered_input=unbuffered_input)
        peer_in, conn_out = pipe_pair()
        conn = JsonRpcConnection(conn_in, conn_out, **kwargs)
        peer = RawPeer(peer_out, peer_in)
        made.append((conn, peer, (conn_in, peer_out, peer_in)))
        if start:
            conn.start()
        return Wired(conn, peer)

    yield make
    for conn, peer, (conn_in, peer_out, peer_in) in made:
        conn.close()  # closes the connection's output: the peer's reader sees EOF
        _close_quietly(peer_out)  # EOF for the connection's reader
        _join_reader(conn)
        peer.join()
        _close_quietly(conn_in, peer_in)


@pytest.fixture
def linked() -> Iterator[Callable[..., tuple[JsonRpcConnection, JsonRpcConnection]]]:
    """``linked(**agent_kwargs)``: (client, agent) connections joined by two pipes, not started."""
    made: list[tuple[JsonRpcConnection, JsonRpcConnection, list[IO[bytes]]]] = []

    def make(**agent_kwargs: Any) -> tuple[JsonRpcConnection, JsonRpcConnection]:
        agent_in, client_out = pipe_pair()
        client_in, agent_out = pipe_pair()
        client = JsonRpcConnection(client_in, client_out, name="client")
        agent = JsonRpcConnection(agent_in, agent_out, name="agent", **agent_kwargs)
        made.append((client, agent, [client_in, agent_in]))
        return client, agent

    yield make
    for client, agent, inputs in made:
        client.close()  # each close ends the other side's input
        agent.close()
        _join_reader(client)
        _join_reader(agent)
        _close_quietly(*inputs)


def echo_agent_command(*args: str) -> list[str]:
    return [sys.executable, str(ECHO_AGENT), *args]


def echo_agent_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    return env


class RecordingOutput:
    """An output stream that keeps each write as the connection made it (no pipe to drain:
    what a write looked like is the thing a test checks)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: Any) -> int:
        self.writes.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass
