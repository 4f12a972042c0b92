"""Sessions owned by the daemon rather than by the connection that opened them.

A ``SessionPool`` wraps the daemon's ``SessionHost`` (the in-process
runtime, or the worker processes) and its ``SessionArchive`` (the store).
Each connection talks to it through its own ``PoolClient``, which *is* a
host and an archive to that connection's ACP agent, so the agent is the
same one ``toolprep acp`` runs on stdio. What changes is ownership:

- opening or loading a session attaches the connection to it; any number
  may be attached, and one that loads a session that is running joins it
  mid-turn (everything so far is replayed to it first);
- a connection that goes away only detaches: the session and its running
  turn go on. With ``detached_turns="continue"`` (``serve``'s default) a turn
  nobody is attached to runs to its end (a permission it asks for waits for
  the first client that attaches), and only one left alone for
  ``max_detached_s`` is cancelled, the reason said in the session; with
  ``"cancel"`` it is cancelled once the last client has been gone for
  ``grace_s``, as stdin EOF cancels it for ``toolprep acp``. An idle session
  nobody is attached to is evicted (closed in the host: its frames, history
  and provider state leave memory) after ``idle_evict_s`` (default
  ``grace_s``), which bounds memory by what is in use: with a store behind it
  its history and frames stay stored (loading it brings it back); without one
  (``--no-persist``) nobody could load it again anyway;
- ``frame_cache`` bounds the frames a live session keeps for replays, the
  store holding the rest (without it, every frame is kept while it is live);
- ``session/list`` pages (``LIST_PAGE_SIZE`` sessions and a ``nextCursor``),
  with a store or without;
- ``max_sessions`` bounds the sessions open at once;
- ``mcp_policy`` decides which MCP servers a client may name: an entry it
  refuses fails ``session/new`` and ``session/load`` (even of a live session,
  which would not start it) before anything is reserved or started. The
  host checks again where it starts servers;
- ``metrics`` (``runtime/telemetry``) counts each answered prompt by its stop
  reason, and reads the live sessions and attached clients when collected.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Final, Literal, assert_never, get_args

from toolprep.messages.content import Part
from toolprep.messages.modes import SessionMode
from toolprep.messages.permissions import PermissionOutcome
from toolprep.messages.turns import TurnResult, UserMessage
from toolprep.runtime.daemon.grace_timers import GraceTimers
from toolprep.runtime.daemon.shared_session import (
    ClientConnection,
    SharedSession,
    StoredFrameCache,
)
from toolprep.runtime.kernel.session_host import (
    NO_EDITOR,
    EditorAnswer,
    EditorCapabilities,
    FrameSink,
    SessionArchive,
    SessionConfig,
    SessionHost,
    SessionInfo,
    SessionLimitReached,
    UnknownSession,
)
from toolprep.runtime.mcp.policy import McpPolicy
from toolprep.runtime.mcp.specs import McpServerSpec
from toolprep.runtime.store.list_cursor import decode_list_cursor, encode_list_cursor
from toolprep.runtime.telemetry.instruments import NO_METRICS, Metrics, TurnOutcome

__all__ = [
    "DEFAULT_GRACE_S",
    "DEFAULT_MAX_DETACHED_S",
    "DETACHED_TURNS",
    "LIST_PAGE_SIZE",
    "DetachedTurns",
    "PoolClient",
    "SessionPool",
]

logger = logging.getLogger(__name__)

DEFAULT_GRACE_S = 30.0

DetachedTurns = Literal["continue", "cancel"]
"""What becomes of a running turn once its last client is gone (``--detached-turns``)."""

DETACHED_TURNS: Final[tuple[DetachedTurns, ...]] = get_args(DetachedTurns)

DEFAULT_MAX_DETACHED_S: Final = 6 * 3600.0
"""How long a turn goes on with nobody attached before it is cancelled: a long refactor
left running overnight is still bounded, and a turn stuck on a permission nobody will
answer does not hold its tool processes for ever."""

LIST_PAGE_SIZE = 50
"""Sessions per ``session/list`` page when no store keeps them (the store pages alike)."""


class SessionPool:
    def __init__(
        self,
        host: SessionHost,
        archive: SessionArchive | None = None,
        *,
        max_sessions: int | None = None,
        grace_s: float = DEFAULT_GRACE_S,
        detached_turns: DetachedTurns = "continue",
        max_detached_s: float = DEFAULT_MAX_DETACHED_S,
        idle_evict_s: float | None = None,
        frame_cache: StoredFrameCache | None = None,
        mcp_policy: McpPolicy | None = None,
        metrics: Metrics = NO_METRICS,
    ) -> None:
        """``mcp_policy`` defaults to allowing clients no MCP server."""
        if idle_evict_s is None:
            idle_evict_s = grace_s
        if not idle_evict_s >= 0:  # also rejects NaN
            raise ValueError(f"idle_evict_s must be >= 0 seconds, got {idle_evict_s}")
        if frame_cache is not None and frame_cache.budget_bytes < 0:
            raise ValueError(f"the frame cache must be >= 0 bytes, got {frame_cache.budget_bytes}")
        if max_sessions is not None and max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
        if detached_turns not in DETACHED_TURNS:
            raise ValueError(f"detached_turns must be one of {DETACHED_TURNS}: {detached_turns!r}")
        if not max_detached_s > 0:  # also rejects NaN
            raise ValueError(f"max_detached_s must be > 0 seconds, got {max_detached_s}")
        self.host = host
        self.archive = archive
        self.max_sessions = max_sessions
        self.grace_s = grace_s
        self.detached_turns: DetachedTurns = detached_turns
        self.max_detached_s = max_detached_s
        self.idle_evict_s = idle_evict_s
        self.frame_cache = frame_cache
        self.mcp_policy = mcp_policy or McpPolicy()
        self._lock = threading.Lock()
        self._sessions: dict[str, SharedSession] = {}
        self._timers = GraceTimers(self._unattended)
        self._closed = False
        self._metrics = metrics
        metrics.observe_sessions(self)

    def client(self) -> PoolClient:
        """The host and archive one connection's agent talks to."""
        return PoolClient(self)

    @property
    def open_sessions(self) -> int:
        with self._lock:
            return len(self._sessions)

    @property
    def attached_clients(self) -> int:
        """Client connections attached to open sessions, once per session."""
        with self._lock:
            live = list(self._sessions.values())
        return sum(shared.attached for shared in live)

    @property
    def cached_frame_bytes(self) -> int:
        """What the live sessions' kept frames take in memory."""
        with self._lock:
            live = list(self._sessions.values())
        return sum(shared.kept_bytes for shared in live)

    def shutdown(self, timeout: float = 10.0) -> None:
        with self._lock:
            self._closed = True
        self._timers.shutdown()
        self.host.shutdown(timeout)

    # --- what PoolClient calls ------------------------------------------------------------

    def open(
        self,
        client: ClientConnection,
        cwd: str | Path,
        session_id: str | None,
        editor: EditorCapabilities,
        mcp_servers: Sequence[McpServerSpec] = (),
    ) -> str:
        if mcp_servers:
            self.mcp_policy.check(mcp_servers)
        shared = self._reserve(session_id, str(cwd))
        try:
            opened = self.host.open_session(
                cwd, shared, shared.session_id, editor=editor, mcp_servers=mcp_servers
            )
        except BaseException:
            self._forget(shared.session_id)
            raise
        shared.attach(client, replay=False)
        return opened

    def load(
        self,
        client: ClientConnection,
        session_id: str,
        editor: EditorCapabilities,
        replay: bool,
        mcp_servers: Sequence[McpServerSpec] = (),
        after_seq: int = 0,
    ) -> None:
        """Attach ``client`` to the session, opening it from the store if it is not live.

        Either way the client's replay comes from the shared session's frames, the
        session's log (loaded from the store when the session opens here), from
        frame ``after_seq`` on.

        A live session keeps the MCP servers it was opened with: ``mcp_servers``
        only start with a session that is opened here. Either way they must be allowed.
        """
        if mcp_servers:
            self.mcp_policy.check(mcp_servers)
        with self._lock:
            live = self._sessions.get(session_id)
        if live is not None:
            self._cancel_timer(session_id)
            live.attach(client, replay=replay, after_seq=after_seq)
            return
        if self.archive is None:
            raise UnknownSession(session_id)
        shared = self._reserve(session_id, "")
        try:
            # Replayed into the shared session, which keeps the frames for whoever attaches.
            self.archive.load_session(
                session_id, shared, editor=editor, replay=True, mcp_servers=mcp_servers
            )
        except BaseException:
            self._forget(session_id)
            raise
        shared.restored()
        shared.attach(client, replay=replay, after_seq=after_seq)

    def session(self, session_id: str) -> SharedSession:
        with self._lock:
            shared = self._sessions.get(session_id)
        if shared is None:
            raise UnknownSession(session_id)
        return shared

    def prompt(
        self,
        client: ClientConnection,
        session_id: str,
        parts: Sequence[Part],
        user_message: UserMessage | None = None,
    ) -> Future[TurnResult]:
        shared = self.session(session_id)
        shared.turn_started(client)
        try:
            reply = self.host.prompt(session_id, parts, user_message)
        except BaseException:
            shared.turn_ended()
            raise

        def ended(done: Future[TurnResult]) -> None:
            shared.turn_ended()
            if shared.attached == 0:
                # A detached turn's bound gives way to the idle session's grace period.
                self._cancel_timer(session_id)
                self._start_timer(session_id)
            self._metrics.turn_ended(_outcome(done))  # last: the session's state comes first

        reply.add_done_callback(ended)
        return reply

    def close(self, session_id: str) -> None:
        self._cancel_timer(session_id)
        try:
            self.host.close_session(session_id)
        finally:
            self._forget(session_id)

    def delete(self, session_id: str) -> None:
        with self._lock:
            live = session_id in self._sessions
        if self.archive is None:
            if not live:
                raise UnknownSession(session_id)
            self.close(session_id)
            return
        self._cancel_timer(session_id)
        try:
            self.archive.delete_session(session_id)  # closes it in the host too
        finally:
            self._forget(session_id)

    def list(self, cwd: str | None, cursor: str | None) -> tuple[list[SessionInfo], str | None]:
        """A page of sessions, most recently updated first, and the cursor of the next page.

        Without a store, the open sessions, paged as the store pages what it keeps:
        the cursor names the last one listed, so sessions that open or close between
        two pages neither shift nor repeat the others.
        """
        if self.archive is not None:
            return self.archive.list_sessions(cwd, cursor)
        after = decode_list_cursor(cursor) if cursor is not None else None
        with self._lock:
            live = list(self._sessions.values())
        infos = [
            SessionInfo(s.session_id, s.cwd, None, None, s.created_at, s.updated_at)
            for s in live
            if cwd is None or s.cwd == cwd
        ]
        infos.sort(key=lambda info: (-info.updated_at, info.session_id))
        if after is not None:
            infos = [i for i in infos if (-i.updated_at, i.session_id) > (-after[0], after[1])]
        page = infos[:LIST_PAGE_SIZE]
        more = len(infos) > LIST_PAGE_SIZE
        return page, (encode_list_cursor(page[-1]) if more else None)

    def detach(self, client: ClientConnection, session_ids: Sequence[str]) -> None:
        for session_id in session_ids:
            with self._lock:
                shared = self._sessions.get(session_id)
            if shared is not None and shared.detach(client):
                self._start_timer(session_id)

    # --- internals ------------------------------------------------------------------------

    def _reserve(self, session_id: str | None, cwd: str) -> SharedSession:
        if session_id is None:
            raise ValueError("a session id is required")
        with self._lock:
            if session_id in self._sessions:
                raise ValueError(f"a session with this id is already open: {session_id}")
            if self.max_sessions is not None and len(self._sessions) >= self.max_sessions:
                raise SessionLimitReached(self.max_sessions)
            shared = SharedSession(session_id, self.host, cwd, self.frame_cache)
            self._sessions[session_id] = shared
        return shared

    def _forget(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    def _start_timer(self, session_id: str) -> None:
        with self._lock:
            if self._closed:
                return
            shared = self._sessions.get(session_id)
        running = shared is not None and shared.running
        self._timers.start(session_id, self._unattended_after(running))

    def _unattended_after(self, running: bool) -> float:
        """How long a session nobody is attached to is left as it is."""
        if not running:
            return self.idle_evict_s
        match self.detached_turns:
            case "continue":
                return self.max_detached_s
            case "cancel":
                return self.grace_s
            case _:
                assert_never(self.detached_turns)

    def _cancel_timer(self, session_id: str) -> None:
        self._timers.cancel(session_id)

    def _unattended(self, session_id: str) -> None:
        """Nobody came back within the grace period."""
        with self._lock:
            shared = self._sessions.get(session_id)
        if shared is None or shared.attached:
            return
        try:
            if shared.running:
                waited = self._unattended_after(running=True)
                logger.info("no client came back to %s: cancelling its turn", session_id)
                reason = f"turn cancelled: no client was attached for {waited:g} s"
                self.host.cancel(session_id, reason)  # its end starts the next grace period
            elif self.archive is not None:
                logger.info("%s idle with no client: evicted (it stays stored)", session_id)
                self.close(session_id)
            else:
                logger.info("%s idle with no client: closed (nothing keeps it)", session_id)
                self.close(session_id)
        except UnknownSession:
            self._forget(session_id)


def _outcome(done: Future[TurnResult]) -> TurnOutcome:
    """A finished prompt's stop reason, or ``error`` when it failed."""
    if done.cancelled() or done.exception() is not None:
        return "error"
    return done.result().stop_reason or "error"


class PoolClient:
    """One connection's view of the pool: a ``SessionHost`` and ``SessionArchive`` for its agent.

    The agent passes its ``ConnectionSink`` as every ``sink``; that is the
    connection this view attaches. ``shutdown`` (the connection ended)
    detaches it from every session it joined; the sessions go on.
    """

    def __init__(self, pool: SessionPool) -> None:
        self._pool = pool
        self._lock = threading.Lock()
        self._client: ClientConnection | None = None
        self._joined: set[str] = set()

    def _bind(self, sink: FrameSink, session_id: str) -> ClientConnection:
        if not isinstance(sink, ClientConnection):
            raise TypeError(f"a daemon session needs a client connection as its sink, not {sink!r}")
        client = sink
        with self._lock:
            if self._client is None:
                self._client = client
            self._joined.add(session_id)
            return self._client

    def _bound(self) -> ClientConnection:
        with self._lock:
            if self._client is None:
                raise RuntimeError("this connection has opened no session")
            return self._client

    # --- SessionHost ----------------------------------------------------------------------

    def open_session(
        self,
        cwd: str | Path,
        sink: FrameSink,
        session_id: str | None = None,
        *,
        editor: EditorCapabilities = NO_EDITOR,
        mcp_servers: Sequence[McpServerSpec] = (),
    ) -> str:
        client = self._bind(sink, session_id or "")
        return self._pool.open(client, cwd, session_id, editor, mcp_servers)

    def prompt(
        self, session_id: str, parts: Sequence[Part], user_message: UserMessage | None = None
    ) -> Future[TurnResult]:
        return self._pool.prompt(self._bound(), session_id, parts, user_message)

    def cancel(self, session_id: str, reason: str | None = None) -> None:
        self._pool.session(session_id)
        self._pool.host.cancel(session_id, reason)

    def answer_permission(
        self, session_id: str, request_id: str, outcome: PermissionOutcome
    ) -> bool:
        return self._pool.session(session_id).answer_permission(self._bound(), request_id, outcome)

    def answer_editor(self, session_id: str, request_id: str, answer: EditorAnswer) -> bool:
        return self._pool.host.answer_editor(session_id, request_id, answer)

    def session_config(self, session_id: str) -> SessionConfig:
        self._pool.session(session_id)
        return self._pool.host.session_config(session_id)

    def set_model(self, session_id: str, model: str) -> SessionConfig:
        # Every client attached to the session hears of it through its config_option_update.
        self._pool.session(session_id)
        return self._pool.host.set_model(session_id, model)

    def set_mode(self, session_id: str, mode: SessionMode) -> SessionConfig:
        # Every client attached to the session hears of it through its current_mode_update.
        self._pool.session(session_id)
        return self._pool.host.set_mode(session_id, mode)

    def close_session(self, session_id: str) -> None:
        self._pool.close(session_id)

    def shutdown(self, timeout: float = 10.0) -> None:
        with self._lock:
            client, joined = self._client, sorted(self._joined)
            self._joined.clear()
        if client is not None:
            self._pool.detach(client, joined)

    # --- SessionArchive -------------------------------------------------------------------

    def load_session(
        self,
        session_id: str,
        sink: FrameSink,
        *,
        editor: EditorCapabilities = NO_EDITOR,
        replay: bool = True,
        mcp_servers: Sequence[McpServerSpec] = (),
        after_seq: int = 0,
    ) -> None:
        client = self._bind(sink, session_id)
        self._pool.load(client, session_id, editor, replay, mcp_servers, after_seq)

    def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None
    ) -> tuple[list[SessionInfo], str | None]:
        return self._pool.list(cwd, cursor)

    def delete_session(self, session_id: str) -> None:
        self._pool.delete(session_id)
