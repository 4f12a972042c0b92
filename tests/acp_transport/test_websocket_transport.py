"""JSON-RPC over a real WebSocket: a client that stops reading never blocks the writer."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed as SocketClosed
from websockets.sync.client import connect

from toolprep.runtime.acp.errors import ConnectionClosed
from toolprep.runtime.acp.jsonrpc_connection import JsonRpcConnection
from toolprep.runtime.acp.websocket_transport import WebSocketTransport

QUEUE_LIMIT = 256 * 1024


@contextmanager
def agent_side() -> Iterator[tuple[str, list[JsonRpcConnection]]]:
    """A WebSocket server on an event loop whose connections are JSON-RPC peers."""
    connections: list[JsonRpcConnection] = []

    async def handle(socket: ServerConnection) -> None:
        transport = WebSocketTransport(socket, 1 << 20, max_buffered_bytes=QUEUE_LIMIT)
        connection = JsonRpcConnection.over(transport, name="ws-test")
        connection.on_request("echo", lambda params, _id: params)
        connections.append(connection)
        sender = asyncio.create_task(transport.run())
        try:
            while True:
                connection.receive(await socket.recv(decode=False))
        except SocketClosed:
            pass
        finally:
            connection.end_of_input()
            connection.close()
            await sender

    address: Future[tuple[str, asyncio.AbstractEventLoop, asyncio.Event]] = Future()

    async def main() -> None:
        stop = asyncio.Event()
        async with serve(handle, "127.0.0.1", 0, compression=None) as server:
            host, port = server.sockets[0].getsockname()[:2]
            address.set_result((f"ws://{host}:{port}/", asyncio.get_running_loop(), stop))
            await stop.wait()

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    url, loop, stop = address.result(30)
    try:
        yield url, connections
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)


def test_requests_and_replies_travel_one_per_text_frame() -> None:
    with agent_side() as (url, _connections), connect(url, compression=None) as client:
        client.send('{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":[1,2]}}')
        assert client.recv(timeout=30) == '{"jsonrpc":"2.0","id":1,"result":{"a":[1,2]}}'
        client.send("{broken")
        assert '"code":-32700' in str(client.recv(timeout=30))


def test_a_client_that_stops_reading_is_cut_off_instead_of_blocking_the_writer() -> None:
    payload = {"text": "x" * 16 * 1024}
    with agent_side() as (url, connections), connect(url, compression=None) as client:
        client.send('{"jsonrpc":"2.0","id":1,"method":"echo","params":{}}')
        client.recv(timeout=30)
        [agent] = connections
        # A writer that waited for the socket would hang here, never reaching the cut-off:
        # the client reads nothing until the loop ends.
        with pytest.raises(ConnectionClosed, match=r"fell (\d+) bytes behind") as cut:
            for _ in range(100_000):  # far more than any socket buffer holds
                agent.notify("session/update", payload)
        # Cut off by the buffer limit: the buffer, not the socket, took the writes.
        behind = re.search(r"fell (\d+) bytes", str(cut.value))
        assert behind is not None
        assert QUEUE_LIMIT < int(behind[1]) <= QUEUE_LIMIT + len(payload["text"]) + 200, behind
        # The client is told why once it reads again: close code 1008, policy violation.
        with pytest.raises(SocketClosed):
            while True:
                client.recv(timeout=30)
        assert client.close_code == 1008


def test_frames_written_together_still_travel_one_per_text_frame() -> None:
    with agent_side() as (url, connections), connect(url, compression=None) as client:
        client.send('{"jsonrpc":"2.0","id":1,"method":"echo","params":{}}')
        client.recv(timeout=30)
        [agent] = connections
        agent.notify_many("session/update", [{"n": n} for n in range(3)])
        frames = [client.recv(timeout=30) for _ in range(3)]
        assert frames == [
            f'{{"jsonrpc":"2.0","method":"session/update","params":{{"n":{n}}}}}' for n in range(3)
        ]


def test_frames_written_together_past_the_limit_cut_the_client_off_whole() -> None:
    """All of a batch is buffered or none of it: the client never gets half a batch."""
    payload = {"text": "x" * 1024}
    with agent_side() as (url, connections), connect(url, compression=None) as client:
        client.send('{"jsonrpc":"2.0","id":1,"method":"echo","params":{}}')
        client.recv(timeout=30)
        [agent] = connections
        with pytest.raises(ConnectionClosed, match=r"fell (\d+) bytes behind") as cut:
            agent.notify_many("session/update", [payload] * (2 * QUEUE_LIMIT // 1024))
        behind = re.search(r"fell (\d+) bytes", str(cut.value))
        assert behind is not None
        assert int(behind[1]) > 2 * QUEUE_LIMIT, behind
        with pytest.raises(SocketClosed):
            client.recv(timeout=30)
        assert client.close_code == 1008
