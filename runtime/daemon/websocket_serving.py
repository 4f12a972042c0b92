"""Serve ACP over WebSocket from one's own process: what ``toolprep serve`` does, for an
embedder with a session host of its own.

The daemon's sessions outlive connections: a client that reconnects finds them again, a
turn goes on for a grace period with nobody attached. An embedder that builds its own
``Runtime`` (or worker host) gets that with one call instead of assembling the session
pool and the server the way the CLI does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from toolprep.runtime.acp.jsonrpc_transport import DEFAULT_MAX_LINE_BYTES
from toolprep.runtime.daemon.serve_options import (
    DEFAULT_MAX_BUFFERED_BYTES,
    DEFAULT_PING_INTERVAL_S,
    DEFAULT_PING_TIMEOUT_S,
)
from toolprep.runtime.daemon.session_pool import (
    DEFAULT_GRACE_S,
    DEFAULT_MAX_DETACHED_S,
    DetachedTurns,
)
from toolprep.runtime.daemon.shared_session import StoredFrameCache
from toolprep.runtime.kernel.event_loops import EventLoopChoice
from toolprep.runtime.kernel.session_host import SessionArchive, SessionHost
from toolprep.runtime.mcp.policy import McpPolicy
from toolprep.runtime.telemetry.health import ALWAYS_READY, Readiness
from toolprep.runtime.telemetry.setup import Telemetry

__all__ = ["serve_websocket"]

logger = logging.getLogger(__name__)

_STOP_POLL_S = 0.1


def serve_websocket(
    session_host: SessionHost,
    /,
    archive: SessionArchive | None = None,
    *,
    token: str,
    host: str = "127.0.0.1",
    port: int = 0,
    allowed_origins: Iterable[str] = (),
    mcp_policy: McpPolicy | None = None,
    max_sessions: int | None = None,
    disconnect_grace_s: float = DEFAULT_GRACE_S,
    detached_turns: DetachedTurns = "continue",
    max_detached_s: float = DEFAULT_MAX_DETACHED_S,
    idle_evict_s: float | None = None,
    frame_cache: StoredFrameCache | None = None,
    max_message_bytes: int = DEFAULT_MAX_LINE_BYTES,
    max_connections: int = 1000,
    max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES,
    ping_interval_s: float | None = DEFAULT_PING_INTERVAL_S,
    ping_timeout_s: float | None = DEFAULT_PING_TIMEOUT_S,
    event_loop: EventLoopChoice = "auto",
    meta: Mapping[str, object] | None = None,
    stop_requested: Callable[[], bool] | None = None,
    on_listening: Callable[[str], None] | None = None,
    log_level: str | None = None,
    telemetry: Telemetry | None = None,
    ready: Readiness = ALWAYS_READY,
    metrics_port: int | None = None,
    on_metrics_listening: Callable[[str], None] | None = None,
) -> None:
    """Serve ACP over WebSocket at ``ws://HOST:PORT/acp`` with the sessions of
    ``session_host`` until ``stop_requested()`` turns true (polled a few times a second;
    by default never, so until ``KeyboardInterrupt``); then cancel the running turns
    (clients see the discards and their prompts answered), close the connections and
    shut ``session_host`` down.

    Every client must send ``Authorization: Bearer TOKEN``; a WebSocket upgrade carrying an
    ``Origin`` header (any browser's) is refused unless that origin (``scheme://host[:port]``)
    is in ``allowed_origins``. ``port`` 0 picks a free one: ``on_listening(url)`` is called
    once the server listens, with the URL clients connect to; an exception it raises stops
    the serving (everything shut down as above) and is raised from here.

    ``mcp_policy`` says which MCP servers clients may name (default: none; the clients of a
    network service are not the user). ``archive`` (a ``Runtime`` built with a store is one)
    adds ``session/load``, ``session/list`` and ``session/delete``. ``max_sessions`` caps the
    open sessions. A session's running turn goes on with no client attached: to its end
    (``detached_turns="continue"``) unless left alone for ``max_detached_s``, or for
    ``disconnect_grace_s`` only (``"cancel"``); an idle session nobody is attached to is
    evicted from memory after ``idle_evict_s`` (default ``disconnect_grace_s``; it stays
    stored). ``frame_cache`` (the store's ``frame_log`` and a budget) bounds the frames a
    live session keeps for replays; without it all are kept while it is live. The other limits are
    the server's (``AcpServer``): message size, connections, bytes buffered per connection,
    pings. ``meta`` is what ``initialize`` says under ``_meta.toolprep``; ``log_level``
    (``"INFO"``, say) sends the log to stderr at that level (default: logging left as the
    process configured it).

    ``token`` must not be empty; on a non-loopback ``host`` it must be at least
    ``MIN_REMOTE_TOKEN_CHARS`` (16) characters long, as ``toolprep serve`` requires.

    ``telemetry`` (``runtime.telemetry.setup.start_telemetry``) gets the sessions'
    and connections' instruments, and is what ``GET /metrics`` (with the token) serves;
    ``ready`` is what ``GET /readyz`` asks; ``GET /healthz`` answers while serving.
    ``metrics_port`` serves ``/metrics`` without a token on that loopback port too (0 picks
    one): ``on_metrics_listening(url)`` is called once it listens.

    Raises ``ValueError`` for an option it cannot serve with (a bad origin, a short token) and
    ``OSError`` when it cannot listen (the port taken), ``session_host`` shut down first.
    """
    from toolprep.runtime.daemon.admission import parse_allowed_origin
    from toolprep.runtime.daemon.serve_token import check_served_token
    from toolprep.runtime.daemon.server import AcpServer
    from toolprep.runtime.daemon.session_pool import SessionPool
    from toolprep.runtime.telemetry.instruments import NO_METRICS

    if log_level is not None:
        from toolprep.runtime.hosting.assembly import configure_logging

        configure_logging(log_level)
    pool = SessionPool(
        session_host,
        archive,
        max_sessions=max_sessions,
        grace_s=disconnect_grace_s,
        detached_turns=detached_turns,
        max_detached_s=max_detached_s,
        idle_evict_s=idle_evict_s,
        frame_cache=frame_cache,
        mcp_policy=mcp_policy,
        metrics=telemetry.metrics if telemetry is not None else NO_METRICS,
    )
    try:
        check_served_token(token, host)
        server = AcpServer(
            pool,
            host=host,
            port=port,
            token=token,
            allowed_origins=frozenset(parse_allowed_origin(o) for o in allowed_origins),
            max_message_bytes=max_message_bytes,
            max_connections=max_connections,
            max_buffered_bytes=max_buffered_bytes,
            ping_interval_s=ping_interval_s,
            ping_timeout_s=ping_timeout_s,
            event_loop=event_loop,
            agent_meta=meta,
            telemetry=telemetry,
            ready=ready,
            metrics_port=metrics_port,
        )
    except BaseException:
        pool.shutdown()
        raise
    # Listening before ``on_listening``, so that a failure there can shut the server down
    # (its shutdown waits for serve_forever).
    listener = threading.Thread(target=server.serve_forever, name="toolprep-listener", daemon=True)
    listener.start()
    try:
        if on_listening is not None:
            on_listening(server.url)
        if on_metrics_listening is not None and server.metrics_url is not None:
            on_metrics_listening(server.metrics_url)
        while not (stop_requested or _never)():
            time.sleep(_STOP_POLL_S)
        logger.info("stop requested: ending the running turns")
    finally:
        pool.shutdown()
        server.shutdown()


def _never() -> bool:
    return False
