"""The undocumented parts of ``websockets`` the daemon's server uses, and only here.

The daemon accepts sockets itself (``acceptor``) and hands each to the ``websockets``
asyncio server the way ``serve`` does inside: a ``ServerConnection`` whose
``connection_made`` registers its handler task in ``Server.handler_tasks``. It counts
and waits for those tasks, answers 503 mid-handshake by the server's ``is_serving``
(replaced, since the library's own asyncio server never serves), and drops a socket
through the connection's asyncio ``transport``. None of this is in the documented API;
each is one plain call per connection or per stop, never per message.
``tests/acp/test_websockets_compat_contract.py`` runs them against a real server and
fails, naming websockets and its version, when an upgrade breaks one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from websockets.asyncio.connection import Connection
from websockets.asyncio.server import Server, ServerConnection
from websockets.server import ServerProtocol

__all__ = ["abort", "handler_tasks", "new_server_connection", "serve_while"]


def serve_while(server: Server, accepting: Callable[[], bool]) -> None:
    """Make ``server`` accept upgrades while ``accepting()`` holds and answer 503 after,
    whatever its own asyncio server's state."""
    server.is_serving = accepting  # type: ignore[method-assign]


def new_server_connection(
    server: Server,
    *,
    max_size: int,
    ping_interval: float | None,
    ping_timeout: float | None,
    close_timeout: float | None,
) -> ServerConnection:
    """An accepted socket's protocol, made as ``serve`` makes it: once connected, its
    handler runs as one of ``server``'s handler tasks."""
    return ServerConnection(
        ServerProtocol(max_size=max_size),
        server,
        ping_interval=ping_interval,
        ping_timeout=ping_timeout,
        close_timeout=close_timeout,
    )


def handler_tasks(server: Server) -> set[asyncio.Task[None]]:
    """The tasks running ``server``'s handler, one per connection not yet done (live: the
    library's own set)."""
    return server.handler_tasks


def abort(connection: Connection) -> None:
    """Drop ``connection``'s socket now, without a closing handshake."""
    connection.transport.abort()
