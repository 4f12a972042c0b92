"""``toolprep serve``'s network side: ACP over WebSocket on ``/acp``.

Each WebSocket connection gets the same ACP agent ``toolprep acp`` runs on
stdio, over a ``WebSocketTransport`` (one JSON-RPC message per text frame),
talking to the daemon's ``SessionPool`` through its own ``PoolClient``; so
every protocol behaviour, error reply and size limit is the stdio one.

The socket side is the ``websockets`` library's threaded server: toolprep
is built on threads (actors, one stream loop), the library does the
handshake, framing, pings and limits, and the ACP SDK's ASGI transport
creates an agent per connection, which is exactly what sessions owned by the
daemon must not depend on.

Security model (``admission``): every upgrade needs ``Authorization: Bearer
<token>``; one carrying an ``Origin`` (a browser's) is refused unless that
origin was allowed, and on a loopback address a ``Host`` that is not a
loopback name (DNS rebinding) is refused; all before the WebSocket is
opened. A client that sends a message over the limit is disconnected with
close code 1009; one that stops reading is disconnected once its queue is
full; neither touches the sessions, which other clients (or the same one,
reconnected) go on using. A client gone right after the handshake costs
nothing: its handler finds the connection closed and undoes what it built.
"""

from __future__ import annotations

import contextlib
import http
import itertools
import logging
import threading
from typing import Final

from websockets.http11 import Request, Response
from websockets.sync.server import Server, ServerConnection, serve

from toolprep.runtime.acp.agent import AcpAgent
from toolprep.runtime.acp.jsonrpc import DEFAULT_MAX_LINE_BYTES, JsonRpcConnection
from toolprep.runtime.acp.websocket_transport import WebSocketTransport
from toolprep.runtime.daemon.admission import Admission
from toolprep.runtime.daemon.session_pool import SessionPool

__all__ = ["ACP_PATH", "AcpServer"]

logger = logging.getLogger(__name__)

ACP_PATH: Final = "/acp"


class AcpServer:
    """Listens from construction on; ``serve_forever`` serves until ``shutdown``."""

    def __init__(
        self,
        pool: SessionPool,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str,
        allowed_origins: frozenset[str] = frozenset(),
        max_message_bytes: int = DEFAULT_MAX_LINE_BYTES,
    ) -> None:
        self.pool = pool
        self._admission = Admission(token, allowed_origins, host)
        self._max_message_bytes = max_message_bytes
        self._ids = itertools.count(1)
        self._connections = 0
        self._lock = threading.Lock()
        self._server: Server = serve(
            self._serve_connection,
            host,
            port,
            process_request=self._check_request,
            max_size=max_message_bytes,
            compression=None,
        )

    @property
    def url(self) -> str:
        host, port = self._server.socket.getsockname()[:2]
        if ":" in host:
            host = f"[{host}]"
        return f"ws://{host}:{port}{ACP_PATH}"

    @property
    def connections(self) -> int:
        with self._lock:
            return self._connections

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def shutdown(self) -> None:
        """Stop accepting, close every connection (1001) and wait for their handlers."""
        self._server.shutdown()

    def _check_request(self, connection: ServerConnection, request: Request) -> Response | None:
        if request.path.split("?", 1)[0] != ACP_PATH:
            return connection.respond(http.HTTPStatus.NOT_FOUND, f"ACP is served on {ACP_PATH}\n")
        refusal = self._admission.check(request.headers)
        if refusal is None:
            return None
        logger.info("refused a WebSocket upgrade (%d): %s", refusal.status, refusal.reason)
        return connection.respond(refusal.status, refusal.reason + "\n")

    def _serve_connection(self, socket: ServerConnection) -> None:
        name = f"ws-{next(self._ids)}"
        try:
            peer = socket.remote_address
        except OSError:  # the client left right after the handshake; reading ends at once
            peer = "a client already gone"
        with contextlib.ExitStack() as cleanup:  # whatever was built is undone, in reverse
            with self._lock:
                self._connections += 1
            cleanup.callback(self._disconnected, name)
            transport = WebSocketTransport(socket, self._max_message_bytes)
            connection = JsonRpcConnection.over(transport, name=name)
            cleanup.callback(connection.close)
            client = self.pool.client()
            cleanup.callback(client.shutdown)  # detaches; the sessions go on
            AcpAgent(client, connection, archive=client)
            logger.info("%s: connected from %s", name, peer)
            connection.run()  # this thread reads: the library gave it to this connection

    def _disconnected(self, name: str) -> None:
        with self._lock:
            self._connections -= 1
        logger.info("%s: disconnected", name)
