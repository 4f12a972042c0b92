"""The contract of ``runtime/acp/websockets_compat.py`` with the installed websockets.

Run against a real ``websockets`` asyncio server that, like the daemon's, never accepts
itself: a socket accepted by the test is handed to it through
``new_server_connection``; its handler then runs as a handler task the server counts;
``serve_while`` decides whether an upgrade is accepted or answered 503; ``abort`` drops
a connection. An upgrade of websockets that breaks one fails here, naming it and its
version, instead of as a daemon that stops counting, refusing or dropping connections.
"""

from __future__ import annotations

import asyncio
import socket

import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.support.contract import broken
from toolprep.runtime.acp.websockets_compat import (
    abort,
    handler_tasks,
    new_server_connection,
    serve_while,
)

COMPAT = "runtime/acp/websockets_compat.py"


def _says(what: str) -> str:
    return broken("websockets", COMPAT, what)


async def _exercise() -> None:
    loop = asyncio.get_running_loop()
    accepting = True
    served: list[ServerConnection] = []
    release = asyncio.Event()

    async def handler(connection: ServerConnection) -> None:
        served.append(connection)
        await release.wait()
        await connection.wait_closed()

    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    server = await serve(handler, sock=listener.dup(), start_serving=False)
    serve_while(server, lambda: accepting)

    async def accept_one() -> None:
        accepted, _ = await loop.sock_accept(listener)
        await loop.connect_accepted_socket(
            lambda: new_server_connection(
                server, max_size=1024, ping_interval=None, ping_timeout=None, close_timeout=5
            ),
            accepted,
        )

    try:
        accepting_task = asyncio.create_task(accept_one())
        try:
            opened = await connect(f"ws://127.0.0.1:{port}/")
        except InvalidStatus as exc:
            raise AssertionError(
                _says(f"serve_while's predicate holds, yet the upgrade was answered {exc}")
            ) from exc
        async with opened as client:
            await accepting_task
            assert served, _says("a connection made by new_server_connection reached no handler")
            assert len(handler_tasks(server)) == 1, _says(
                f"Server.handler_tasks holds {len(handler_tasks(server))} tasks, not the one"
            )
            abort(served[0])
            with pytest.raises(ConnectionClosed):
                await client.recv()
        release.set()
        await asyncio.wait_for(asyncio.gather(*handler_tasks(server)), 30)
        assert not handler_tasks(server), _says("a finished handler stays in Server.handler_tasks")

        accepting = False
        refused_task = asyncio.create_task(accept_one())
        with pytest.raises(InvalidStatus) as refused:
            async with connect(f"ws://127.0.0.1:{port}/"):
                pass
        await refused_task
        assert refused.value.response.status_code == 503, _says(
            "an upgrade while serve_while's predicate is false was not answered 503"
        )
    finally:
        server.close()
        await server.wait_closed()
        listener.close()


def test_accepted_sockets_are_served_counted_refused_and_dropped_as_the_daemon_needs() -> None:
    asyncio.run(_exercise())
