"""``toolprep serve``'s network side: ACP over WebSocket on ``/acp`` (experimental).

Each WebSocket connection gets the same ACP agent ``toolprep acp`` runs on
stdio, over a ``WebSocketTransport`` (one JSON-RPC message per text frame),
talking to the daemon's ``SessionPool`` through its own ``PoolClient``; so
every protocol behaviour, error reply and size limit is the stdio one.

Threads do not grow with connections. The sockets live on one event loop
(the ``websockets`` asyncio server, on a thread of its own), which never
blocks: it does the handshakes, framing, pings and limits. Each
connection's messages go, in order, to a ``SerialInbox`` drained by a pool
of ``HANDLER_THREADS`` threads all connections share (handlers may block on
the store). Frames from the runtime's threads go to the connection's
bounded buffer and are sent by the loop; a client that falls behind by
more than ``max_buffered_bytes`` is cut off (close 1008) without slowing
the writer or anyone else. The loop is uvloop's when it is installed
(``event_loops``, ``--event-loop``), asyncio's otherwise. The listening
socket and its accept loop are the daemon's own (``acceptor``), so that
running out of descriptors pauses accepting and resumes on either loop
(uvloop would close the listening socket for good); each accepted socket
goes to the ``websockets`` protocol the same way its own server does it.

Security model (``admission``): every upgrade needs ``Authorization: Bearer
<token>``, or a challenge (``daemon_proof``: what ``toolprep connect``
sends, so that a squatter on a stale port never learns the token), in which
case the 101 carries the daemon's proof of the token and the connection's
first message must be the client's, or it is closed (1008) before any
message reaches a session; one carrying an ``Origin`` (a browser's) is refused unless that
origin was allowed, and on a loopback address a ``Host`` that is not a
loopback name (DNS rebinding) is refused; all before the WebSocket is
opened. Past ``max_connections`` open sockets an upgrade is answered 503
with ``Retry-After``. A client that sends a message over the limit is
disconnected with close code 1009. None of this touches the sessions,
which other clients (or the same one, reconnected) go on using. Each
accepted upgrade carries an ``Acp-Connection-Id`` header, the name its log
lines use, and a ``Toolprep-Max-Message-Bytes`` header with the message limit,
which ``toolprep connect`` bridges with (``message_limit``). Frames the daemon
sends are cut to fit that limit too (``frame_fit``).

Stopping closes every connection at once (1001), within ``stop_budget_s``
in all; sockets whose client has not answered by then are dropped.

Beside ``/acp`` the same port answers plain GETs (``http_endpoints``): ``/metrics``
(the bearer token required), ``/healthz`` and ``/readyz`` (no token); with
``metrics_port`` the metrics are also served without a token on a loopback-only port
(``metrics_port``). The server reads its open connections and the bytes buffered for
them into ``telemetry``'s instruments when they are collected.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import logging
import threading
import time
import weakref
from collections.abc import Mapping
from typing import Final

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode
from websockets.http11 import Request, Response

from toolprep.runtime.acp.agent import AcpAgent
from toolprep.runtime.acp.jsonrpc_connection import JsonRpcConnection
from toolprep.runtime.acp.jsonrpc_transport import DEFAULT_MAX_LINE_BYTES
from toolprep.runtime.acp.websocket_transport import WebSocketTransport
from toolprep.runtime.acp.websockets_compat import (
    abort,
    handler_tasks,
    new_server_connection,
    serve_while,
)
from toolprep.runtime.daemon.acceptor import Acceptor, listening_socket
from toolprep.runtime.daemon.admission import Admission, Challenged
from toolprep.runtime.daemon.daemon_proof import PROOF_TIMEOUT_S, DaemonChallenge
from toolprep.runtime.daemon.http_endpoints import HttpEndpoints
from toolprep.runtime.daemon.limits import RETRY_AFTER_S
from toolprep.runtime.daemon.message_limit import LIMIT_HEADER
from toolprep.runtime.daemon.metrics_port import MetricsPort
from toolprep.runtime.daemon.serial_inbox import SerialInbox
from toolprep.runtime.daemon.serve_options import (
    DEFAULT_MAX_BUFFERED_BYTES,
    DEFAULT_PING_INTERVAL_S,
    DEFAULT_PING_TIMEOUT_S,
)
from toolprep.runtime.daemon.session_pool import SessionPool
from toolprep.runtime.kernel.event_loops import EventLoopChoice, new_stream_loop
from toolprep.runtime.kernel.loop_lag import watch_loop_lag
from toolprep.runtime.kernel.observer import NO_OBSERVER
from toolprep.runtime.kernel.threads import prestarted_pool
from toolprep.runtime.telemetry.health import ALWAYS_READY, Readiness
from toolprep.runtime.telemetry.setup import Telemetry

__all__ = [
    "ACP_PATH",
    "CONNECTION_ID_HEADER",
    "HANDLER_THREADS",
    "STOP_BUDGET_S",
    "AcpServer",
]

logger = logging.getLogger(__name__)

ACP_PATH: Final = "/acp"
CONNECTION_ID_HEADER: Final = "Acp-Connection-Id"
HANDLER_THREADS: Final = 32
STOP_BUDGET_S: Final = 3.0
_CLOSE_TIMEOUT_S: Final = 10.0  # a cut-off client's time to read up to its close frame
_LISTEN_BACKLOG: Final = 4096  # a burst of connects waits in the kernel, not refused


def connection_name(socket: ServerConnection) -> str:
    return f"ws-{socket.id.hex}"


class AcpServer:
    """Listens from construction on; ``serve_forever`` returns after ``shutdown``."""

    def __init__(
        self,
        pool: SessionPool,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str,
        allowed_origins: frozenset[str] = frozenset(),
        max_message_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_connections: int = 1000,
        max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES,
        ping_interval_s: float | None = DEFAULT_PING_INTERVAL_S,
        ping_timeout_s: float | None = DEFAULT_PING_TIMEOUT_S,
        stop_budget_s: float = STOP_BUDGET_S,
        event_loop: EventLoopChoice = "auto",
        agent_meta: Mapping[str, object] | None = None,
        telemetry: Telemetry | None = None,
        ready: Readiness = ALWAYS_READY,
        metrics_port: int | None = None,
    ) -> None:
        """``agent_meta``: what ``initialize`` says under ``_meta.toolprep``. ``telemetry``:
        the instruments the server reads into and the page ``/metrics`` serves (default:
        none, and ``/metrics`` says so); ``ready``: what ``/readyz`` asks; ``metrics_port``:
        also serve ``/metrics`` without a token on that loopback port (0 picks one)."""
        self._agent_meta = dict(agent_meta or {})
        if max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {max_connections}")
        self.pool = pool
        self._admission = Admission(token, allowed_origins, host)
        self._token = token
        self._challenges: weakref.WeakKeyDictionary[ServerConnection, DaemonChallenge] = (
            weakref.WeakKeyDictionary()
        )
        self._max_message_bytes = max_message_bytes
        self._max_connections = max_connections
        self._max_buffered = max_buffered_bytes
        self._stop_budget = stop_budget_s
        self._ping_interval = ping_interval_s
        self._ping_timeout = ping_timeout_s
        self._live: dict[ServerConnection, WebSocketTransport] = {}
        self._proving: set[ServerConnection] = set()  # challenged, their proof not read yet
        # All started now: the thread count is a constant of the configuration, not of the load.
        self._executor = prestarted_pool(HANDLER_THREADS, "toolprep-acp")
        telemetry = telemetry or Telemetry.off("this server was started without telemetry")
        self._endpoints = HttpEndpoints(
            self._admission,
            telemetry,
            ready,
            self._executor,
            self._accepting,
            probes=True,
            token=True,
        )
        self._metrics_port: MetricsPort | None = None
        self._loop = new_stream_loop(event_loop)
        self._stopped = threading.Event()
        try:
            self._listener = listening_socket(host, port, _LISTEN_BACKLOG)
        except BaseException:
            self._loop.close()
            self._executor.shutdown(wait=False)
            raise
        if metrics_port is not None:
            tokenless = HttpEndpoints(
                Admission(token, allowed_origins, "127.0.0.1"),
                telemetry,
                ready,
                self._executor,
                self._accepting,
                probes=False,
                token=False,
            )
            try:
                self._metrics_port = MetricsPort(tokenless, metrics_port)
            except BaseException:
                self._listener.close()
                self._loop.close()
                self._executor.shutdown(wait=False)
                raise
        try:
            self._server: Server = self._loop.run_until_complete(self._listen())
            self._acceptor = Acceptor(self._loop, self._listener, self._new_connection)
            self._acceptor.start()
        except BaseException:
            self._listener.close()
            if self._metrics_port is not None:
                self._metrics_port.close_unopened()
            self._loop.close()
            self._executor.shutdown(wait=False)
            raise
        telemetry.metrics.observe_connections(self)
        observer = telemetry.observer
        if observer is not NO_OBSERVER:
            watch_loop_lag(self._loop, lambda late: observer.event_loop_lag("connections", late))
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="toolprep-connections", daemon=True
        )
        self._thread.start()

    async def _listen(self) -> Server:
        """The ``websockets`` server, its handshake and connection handling, minus accepting.

        It holds a duplicate of the listening socket only to report it and to close it;
        it never listens on it (``start_serving=False``): the ``Acceptor`` does.
        """
        server = await serve(
            self._serve_connection,
            sock=self._listener.dup(),
            start_serving=False,
            process_request=self._check_request,
            process_response=self._label_response,
            max_size=self._max_message_bytes,
            compression=None,
            ping_interval=self._ping_interval,
            ping_timeout=self._ping_timeout,
            close_timeout=self._stop_budget,
        )
        # Its handshake answers 503 when its own asyncio server is not serving, which this
        # one never is: what counts is whether the daemon still accepts.
        serve_while(server, self._accepting)
        if self._metrics_port is not None:
            await self._metrics_port.open()
        return server

    def _accepting(self) -> bool:
        return not self._acceptor.closed

    def _new_connection(self) -> ServerConnection:
        """One accepted socket's protocol, made as ``serve`` makes it with the options above."""
        return new_server_connection(
            self._server,
            max_size=self._max_message_bytes,
            ping_interval=self._ping_interval,
            ping_timeout=self._ping_timeout,
            close_timeout=self._stop_budget,
        )

    @property
    def url(self) -> str:
        host, port = self._listener.getsockname()[:2]
        if ":" in host:
            host = f"[{host}]"
        return f"ws://{host}:{port}{ACP_PATH}"

    @property
    def metrics_url(self) -> str | None:
        """Where ``/metrics`` is served without a token (``metrics_port``), if anywhere."""
        return None if self._metrics_port is None else self._metrics_port.url

    @property
    def connections(self) -> int:
        return len(self._live)

    @property
    def send_buffer_bytes(self) -> int:
        """Bytes queued for all clients and not yet sent (read from any thread)."""
        return sum(transport.buffered_bytes for transport in list(self._live.values()))

    def serve_forever(self) -> None:
        """Wait until ``shutdown``; the connections are served on the loop's own thread."""
        self._stopped.wait()

    def shutdown(self) -> None:
        """Stop accepting, close every connection (1001) within the stop budget, stop the loop."""
        if self._stopped.is_set():
            return
        stopping = asyncio.run_coroutine_threadsafe(self._stop(), self._loop)
        try:
            stopping.result(self._stop_budget * 2 + 5)
        except TimeoutError:
            logger.warning("connections still closing after the stop budget; leaving them")
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()
        self._executor.shutdown(wait=False)
        self._stopped.set()

    async def _stop(self) -> None:
        started = time.monotonic()
        self._acceptor.close()
        self._listener.close()
        if self._metrics_port is not None:
            await self._metrics_port.close()
        self._server.close(close_connections=False)  # no new connections; 503 mid-handshake
        live = list(self._live.items())
        for _, transport in live:
            transport.close_output(CloseCode.GOING_AWAY)
        for socket in list(self._proving):  # their proof would come to a closing daemon
            abort(socket)
        handlers = set(handler_tasks(self._server))
        dropped = 0
        if handlers:
            _, late = await asyncio.wait(handlers, timeout=self._stop_budget)
            if late:
                still_open = [(s, t) for s, t in live if s in self._live]
                dropped = len(still_open)
                for _, transport in still_open:
                    transport.abort()
                await asyncio.wait(late, timeout=self._stop_budget)
        with contextlib.suppress(TimeoutError):  # the library's own closing task, done by now
            async with asyncio.timeout(self._stop_budget):
                await self._server.wait_closed()
        logger.log(
            logging.WARNING if dropped else logging.INFO,
            "stopped serving: %d connection(s) closed in %.1f s, %d of them dropped after the "
            "%.1f s stop budget",
            len(live),
            time.monotonic() - started,
            dropped,
            self._stop_budget,
        )

    async def _check_request(
        self, connection: ServerConnection, request: Request
    ) -> Response | None:
        path = request.path.split("?", 1)[0]
        if self._endpoints.serves(path):
            return await self._endpoints.answer(connection, request, path)
        if path != ACP_PATH:
            return connection.respond(http.HTTPStatus.NOT_FOUND, f"ACP is served on {ACP_PATH}\n")
        admitted = self._admission.check(request.headers)
        if isinstance(admitted, Challenged):
            self._challenges[connection] = DaemonChallenge.answering(
                self._token, self.url, admitted.nonce
            )
        elif admitted is not None:
            logger.info("refused a WebSocket upgrade (%d): %s", admitted.status, admitted.reason)
            return connection.respond(admitted.status, admitted.reason + "\n")
        open_sockets = len(handler_tasks(self._server))  # this one included
        if open_sockets > self._max_connections:
            logger.info(
                "refused a WebSocket upgrade (503): %d connections open, the limit is %d",
                open_sockets - 1,
                self._max_connections,
            )
            busy = connection.respond(
                http.HTTPStatus.SERVICE_UNAVAILABLE,
                f"this daemon serves at most {self._max_connections} connections; "
                f"retry in {RETRY_AFTER_S} s\n",
            )
            busy.headers["Retry-After"] = str(RETRY_AFTER_S)
            return busy
        return None

    def _label_response(
        self, connection: ServerConnection, request: Request, response: Response
    ) -> Response:
        challenge = self._challenges.get(connection)
        if response.status_code == http.HTTPStatus.SWITCHING_PROTOCOLS:
            response.headers[CONNECTION_ID_HEADER] = connection.id.hex
            response.headers[LIMIT_HEADER] = str(self._max_message_bytes)
            if challenge is not None:
                response.headers.update(challenge.response_headers())
        elif challenge is not None:
            del self._challenges[connection]
        return response

    async def _proved(self, socket: ServerConnection, name: str) -> bool:
        """Whether a challenged connection's first message proves the token; it is closed
        (1008) if not. A bearer connection proved it in its upgrade."""
        challenge = self._challenges.pop(socket, None)
        if challenge is None:
            return True
        self._proving.add(socket)
        try:
            async with asyncio.timeout(PROOF_TIMEOUT_S):
                first = await socket.recv(decode=False)
        except TimeoutError:
            why = f"no proof of the token within {PROOF_TIMEOUT_S:g} s"
        except ConnectionClosed:
            logger.info("%s: left before proving the token", name)
            return False
        else:
            if challenge.bridge_proved(first):
                return True
            why = "wrong proof of the token"
        finally:
            self._proving.discard(socket)
        logger.info("%s: closed: %s", name, why)
        await socket.close(CloseCode.POLICY_VIOLATION, why)
        return False

    async def _serve_connection(self, socket: ServerConnection) -> None:
        name = connection_name(socket)
        if not await self._proved(socket, name):
            return
        try:
            peer = socket.remote_address
        except OSError:  # the client left right after the handshake; reading ends at once
            peer = "a client already gone"
        transport = WebSocketTransport(
            socket,
            self._max_message_bytes,
            max_buffered_bytes=self._max_buffered,
            close_timeout=_CLOSE_TIMEOUT_S,
            name=name,
        )
        connection = JsonRpcConnection.over(transport, name=name)
        client = self.pool.client()
        AcpAgent(client, connection, archive=client, meta=self._agent_meta)
        inbox: SerialInbox[bytes] = SerialInbox(self._executor, connection.receive, self._loop)
        sender = asyncio.create_task(transport.run(), name=f"{name}-sender")
        self._live[socket] = transport
        logger.info("%s: connected from %s", name, peer)
        reason = "input closed (EOF)"
        try:
            while True:
                await inbox.room.wait()
                message = await socket.recv(decode=False)
                inbox.put(message)
        except ConnectionClosed as exc:
            reason = f"connection closed: {exc}"
        finally:

            def disconnect() -> None:  # on the pool, after the messages before it
                connection.end_of_input(reason)
                connection.close()
                client.shutdown()  # detaches; the sessions go on

            await asyncio.shield(asyncio.wrap_future(inbox.close(disconnect)))
            transport.close_output()
            await sender
            del self._live[socket]
            logger.info("%s: disconnected (%s)", name, reason)
