"""``serve --metrics-port PORT``: ``/metrics`` without a token, on a loopback-only port.

For a scraper on the same machine (a local Prometheus, a node agent) that should not hold
the daemon's token, which opens sessions and so runs tools. The port listens on
``127.0.0.1`` only, whatever ``--host`` is; it serves ``/metrics`` and nothing else, and
keeps the ``Host`` and ``Origin`` checks, so a web page (DNS rebinding included) cannot
read it. Its sockets are accepted by the daemon's own ``Acceptor``, on the same loop as
``/acp``, so running out of descriptors pauses it as it pauses ``/acp`` (see ``acceptor``).
"""

from __future__ import annotations

import asyncio
import errno
import http
from typing import Final

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response

from toolprep.runtime.acp.websockets_compat import new_server_connection, serve_while
from toolprep.runtime.daemon.acceptor import Acceptor, listening_socket
from toolprep.runtime.daemon.http_endpoints import METRICS_PATH, HttpEndpoints

__all__ = ["METRICS_HOST", "MetricsPort", "MetricsPortUnavailable"]

METRICS_HOST: Final = "127.0.0.1"
_BACKLOG: Final = 64
_MAX_REQUEST_BYTES: Final = 64 * 1024  # a GET's head; no WebSocket is ever opened here
_CLOSE_TIMEOUT_S: Final = 1.0


class MetricsPortUnavailable(OSError):
    """``--metrics-port`` cannot be listened on (taken, or not allowed)."""


async def _never_upgraded(_: ServerConnection) -> None:
    """Every request is answered in ``process_request``: no WebSocket opens on this port."""


class MetricsPort:
    """Listening once ``open`` returns; ``close`` on the loop. Answers ``endpoints``'
    ``/metrics`` (built without the token) and 404 for any other path."""

    def __init__(self, endpoints: HttpEndpoints, port: int) -> None:
        self._endpoints = endpoints
        try:
            self._listener = listening_socket(METRICS_HOST, port, _BACKLOG)
        except OSError as exc:
            raise MetricsPortUnavailable(
                exc.errno or errno.EADDRINUSE,
                f"cannot listen on --metrics-port {port} ({METRICS_HOST}): {exc.strerror}; "
                "pass another port, or 0 for any free one",
            ) from None
        self._server: Server | None = None
        self._acceptor: Acceptor | None = None

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        server = await serve(
            _never_upgraded,
            sock=self._listener.dup(),
            start_serving=False,
            process_request=self._answer,
            max_size=_MAX_REQUEST_BYTES,
            compression=None,
        )
        acceptor = Acceptor(loop, self._listener, lambda: self._connection(server))
        serve_while(server, lambda: not acceptor.closed)
        self._server, self._acceptor = server, acceptor
        acceptor.start()

    @staticmethod
    def _connection(server: Server) -> ServerConnection:
        return new_server_connection(
            server,
            max_size=_MAX_REQUEST_BYTES,
            ping_interval=None,
            ping_timeout=None,
            close_timeout=_CLOSE_TIMEOUT_S,
        )

    @property
    def url(self) -> str:
        host, port = self._listener.getsockname()[:2]
        return f"http://{host}:{port}{METRICS_PATH}"

    async def _answer(self, connection: ServerConnection, request: Request) -> Response:
        path = request.path.split("?", 1)[0]
        if path != METRICS_PATH:
            return connection.respond(
                http.HTTPStatus.NOT_FOUND, f"this port serves {METRICS_PATH} only\n"
            )
        return await self._endpoints.answer(connection, request, path)

    async def close(self) -> None:
        if self._acceptor is not None:
            self._acceptor.close()
        self._listener.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def close_unopened(self) -> None:
        """Release the socket of a port whose ``open`` never ran (the server failed to start)."""
        self._listener.close()
