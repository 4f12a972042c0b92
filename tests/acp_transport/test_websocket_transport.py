"""JSON-RPC over a real WebSocket: a client that stops reading never blocks the writer."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from websockets.exceptions import ConnectionClosed as SocketClosed
from websockets.sync.client import connect
from websockets.sync.server import ServerConnection, serve

from toolprep.runtime.acp.errors import ConnectionClosed
from toolprep.runtime.acp.jsonrpc import JsonRpcConnection
from toolprep.runtime.acp.websocket_transport import WebSocketTransport

QUEUE_LIMIT = 256 * 1024


@contextmanager
def agent_side() -> Iterator[tuple[str, list[JsonRpcConnection], threading.Event]]:
    """A WebSocket server whose connections are JSON-RPC peers; yields its URL."""
    connections: list[JsonRpcConnection] = []
    done = threading.Event()

    def handle(socket: ServerConnection) -> None:
        transport = WebSocketTransport(socket, 1 << 20, max_queued_bytes=QUEUE_LIMIT)
        connection = JsonRpcConnection.over(transport, name="ws-test")
        connection.on_request("echo", lambda params, _id: params)
        connections.append(connection)
        connection.start()
        done.wait(30)
        connection.close()

    server = serve(handle, "127.0.0.1", 0, compression=None)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.socket.getsockname()[:2]
    try:
        yield f"ws://{host}:{port}/", connections, done
    finally:
        done.set()
        server.shutdown()
        thread.join(10)


def test_requests_and_replies_travel_one_per_text_frame() -> None:
    with agent_side() as (url, _connections, _done), connect(url, compression=None) as client:
        client.send('{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":[1,2]}}')
        assert client.recv() == '{"jsonrpc":"2.0","id":1,"result":{"a":[1,2]}}'
        client.send("{broken")
        assert '"code":-32700' in str(client.recv())


def test_a_client_that_stops_reading_is_cut_off_instead_of_blocking_the_writer() -> None:
    payload = {"text": "x" * 16 * 1024}
    with agent_side() as (url, connections, _done), connect(url, compression=None) as client:
        client.send('{"jsonrpc":"2.0","id":1,"method":"echo","params":{}}')
        client.recv()
        [agent] = connections
        # A writer that waited for the socket would hang here, never reaching the cut-off:
        # the client reads nothing until the loop ends.
        with pytest.raises(ConnectionClosed, match=r"fell (\d+) bytes behind") as cut:
            for _ in range(100_000):  # far more than any socket buffer holds
                agent.notify("session/update", payload)
        # Cut off by the queue limit: the queue, not the socket, took the writes.
        behind = re.search(r"fell (\d+) bytes", str(cut.value))
        assert behind is not None
        assert QUEUE_LIMIT < int(behind[1]) <= QUEUE_LIMIT + len(payload["text"]) + 200, behind
        # The client is told why once it reads again: close code 1008, policy violation.
        with pytest.raises(SocketClosed):
            while True:
                client.recv(timeout=30)
        assert client.close_code == 1008
