"""The session host: one process, many sessions, a fixed set of role actors.

``Runtime`` is the in-process ``SessionHost`` (``runtime.session_host``): what
the ACP agent, or a hosting daemon, talks to. It starts one actor per role,
shared by every session, so the thread count does not depend on how many
sessions are open: five role threads, one asyncio thread for all provider
streams, one timer thread and a bounded tool pool.

Processes a tool call leaves behind (a shell command's background children)
live as long as the turn that started them: the host stops them when the
session has no prompt outstanding any more, and stops all of them at shutdown.
A session's MCP servers (``runtime.mcp``) live as long as the session: their
tools are the session's own, offered after the shared registry's, and the
servers stop when the session closes or the runtime shuts down.

Closing a session returns at once; the roles wind it down after (cancel its
turn, write its last frames, forget it, detach its sink). Opening the same id
again, as a reload does, first waits for that to finish, so nothing of the
closed session reaches the new one and its clean-up cannot undo the new one.

Its parts each have a module beside this one: the roles and their arguments
(``role_table``), the open sessions and unfinished closes (``open_sessions``),
what is read from the store (``stored_sessions``), the tool processes turns
leave behind (``turn_processes``) and the editor requests (``local_requests``).
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from toolprep.actors.acp_emitter import EmitterState, SessionSink
from toolprep.actors.base import EMITTER, SUPERVISOR, TRACKER
from toolprep.actors.directory import RoleDirectory
from toolprep.actors.preparation_tracker import TrackerState
from toolprep.actors.stream_reader import ReaderState
from toolprep.actors.supervisor_state import SupervisorState
from toolprep.actors.tool_executor import ExecutorState
from toolprep.messages.content import Content, Part
from toolprep.messages.frames import agent_message_chunk, config_option_update
from toolprep.messages.modes import DEFAULT_MODE, SessionMode, current_mode_update
from toolprep.messages.turns import (
    AttachSink,
    CancelTurn,
    ChooseModel,
    CloseSession,
    CrashRole,
    OpenSession,
    RememberShownCalls,
    StartTurn,
    TurnResult,
    UserMessage,
    WriteFrames,
)
from toolprep.runtime.hosting.local_requests import ClientRequests
from toolprep.runtime.hosting.open_sessions import OpenSessions, wait_until_closed
from toolprep.runtime.hosting.role_table import RoleSpecs, role_specs, start_roles
from toolprep.runtime.hosting.stored_sessions import JOURNAL_WAIT_S, StoredSessions, route_of
from toolprep.runtime.hosting.turn_processes import TurnProcesses
from toolprep.runtime.kernel.compaction import CompactionPolicy
from toolprep.runtime.kernel.event_loops import EventLoopChoice, check_event_loop
from toolprep.runtime.kernel.observer import NO_OBSERVER, TurnObserver
from toolprep.runtime.kernel.retry import RetryPolicy
from toolprep.runtime.kernel.scheduler import Scheduler
from toolprep.runtime.kernel.session_host import (
    NO_EDITOR,
    EditorAnswer,
    EditorCapabilities,
    FrameSink,
    SessionConfig,
    SessionInfo,
    UnknownModel,
    UnknownSession,
    check_outcome,
)
from toolprep.runtime.mcp import McpConfig, McpServerSpec
from toolprep.runtime.mcp.hub import McpHub
from toolprep.runtime.providers.routes import ModelRoute
from toolprep.runtime.store import SessionStore, StoredSession, StoreError
from toolprep.runtime.store.journal import StoreJournal
from toolprep.runtime.store.numbering import NumberingJournal
from toolprep.runtime.tools.base import ClientFilesystem, PermissionOutcome
from toolprep.runtime.tools.process_groups import ProcessGroups
from toolprep.runtime.tools.registry import ToolRegistry, default_registry

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    """How a ``Runtime`` runs its sessions: retries, the system prompt, tools, limits."""

    retry: RetryPolicy = field(default_factory=RetryPolicy)
    system_prompt: str | None = (
        "You are a coding agent working in the user's project through tools. "
        "Use tools when they help; answer concisely."
    )
    max_tokens: int = 4096
    max_requests_per_turn: int = 50
    tool_timeout: float = 120.0
    tool_workers: int = 8
    max_restarts: int = 5
    restart_window: float = 60.0
    event_loop: EventLoopChoice = "auto"
    """The loop the provider streams run on (``runtime.event_loops``)."""
    compaction: CompactionPolicy = field(default_factory=CompactionPolicy)
    """When a session's history is summarised to fit the context window (``--compact-at``)."""
    default_mode: SessionMode = DEFAULT_MODE
    """The mode a new session starts in (and a stored one that never kept a mode)."""
    session_notice: str | None = None
    """Shown in each session before its first turn (that commands run unsandboxed)."""


class Runtime:
    """Sessions in this process: the in-process ``SessionHost``, one actor per role serving
    every session (``docs/architecture.md``)."""

    def __init__(
        self,
        routes: Sequence[ModelRoute],
        registry: ToolRegistry | None = None,
        config: RuntimeConfig | None = None,
        *,
        store: SessionStore | None = None,
        mcp: McpConfig | None = None,
        observer: TurnObserver = NO_OBSERVER,
    ) -> None:
        """``store``, if given, keeps every session's frames and history (``restore_session``
        opens one again); the caller owns it and closes it after ``shutdown``. ``mcp``
        bounds and scrubs the MCP servers sessions are opened with. ``observer`` hears what
        the roles do (``runtime.kernel.observer``; telemetry)."""
        if not routes:
            raise ValueError("at least one model route is needed")
        self.store = store
        self.config = config or RuntimeConfig()
        check_event_loop(self.config.event_loop)  # before any role's thread starts
        self.registry = registry or default_registry()
        self.mcp = McpHub(mcp)
        self.routes = tuple(routes)
        self.scheduler = Scheduler()
        self.directory = RoleDirectory(
            max_restarts=self.config.max_restarts,
            within_seconds=self.config.restart_window,
            observer=observer,
        )
        self.tracker_state = TrackerState()
        self.journal = StoreJournal(store, observer=observer) if store else None
        # Without a store the frames are numbered all the same: a client's afterSeq then
        # resumes from the daemon's copy of the live session.
        self.emitter_state = EmitterState(journal=self.journal or NumberingJournal())
        self.executor_state = ExecutorState()
        self.reader_state = ReaderState(event_loop=self.config.event_loop)
        self.supervisor_state = SupervisorState()
        self._models = tuple(dict.fromkeys(route.model for route in self.routes))
        self._sessions = OpenSessions(self.config.default_mode)
        self._stored = StoredSessions(store, self.journal, self.routes, self.config.default_mode)
        self._processes = TurnProcesses(self.registry, self.mcp)
        self._requests = ClientRequests()
        start_roles(self.directory, self.role_specs())

    def role_specs(self) -> RoleSpecs:
        """Each role's actor class and constructor arguments (after the directory);
        see ``role_table``."""
        return role_specs(self, self._sessions.client_fs_for)

    # --- the host API ------------------------------------------------------------

    def open_session(
        self,
        cwd: str | Path,
        sink: FrameSink | SessionSink,
        session_id: str | None = None,
        *,
        editor: EditorCapabilities = NO_EDITOR,
        mcp_servers: Sequence[McpServerSpec] = (),
    ) -> str:
        """Open a session whose output goes to ``sink``; see ``SessionHost.open_session``.

        Besides a ``FrameSink``, in-process callers may attach the emitter's
        own ``SessionSink``, which answers permission requests with a future
        (it cannot cross a process, so it is no part of the boundary).
        """
        self.mcp.check(mcp_servers)  # before anything of the session exists
        if self.store is not None:
            self.store.recovery.require_writable()  # a session that could not be kept is refused
        session_id = session_id or f"sess_{uuid.uuid4().hex}"
        resolved = str(Path(cwd).resolve())
        self._sessions.await_close(session_id)
        self._open(session_id, resolved, sink, editor, (), mcp_servers, create_in_store=True)
        return session_id

    def restore_session(
        self,
        session_id: str,
        sink: FrameSink | SessionSink,
        *,
        editor: EditorCapabilities = NO_EDITOR,
        mcp_servers: Sequence[McpServerSpec] = (),
        with_frames: bool = True,
    ) -> StoredSession:
        """Open a stored session again, its history as the model last saw it.

        Returns what was stored (the frames to replay to the editor among it,
        unless ``with_frames`` is False). Raises ``UnknownSession`` for an id
        the store does not hold.
        """
        if self.store is None:
            raise UnknownSession(session_id)
        self.mcp.check(mcp_servers)
        if self._sessions.has(session_id):
            raise ValueError(f"a session with this id is already open: {session_id}")
        # Its last life in this process must be over before the store is read: its final
        # frames and history go to the journal on the way out.
        self._sessions.await_close(session_id)
        found = self._stored.read_for_restore(self.store, session_id, with_frames)
        stored = found.stored
        self._open(
            session_id,
            stored.info.cwd,
            sink,
            editor,
            stored.history,
            mcp_servers,
            found.route,
            found.mode,
            shown_call_ids=found.shown_call_ids,
        )
        return stored

    # --- SessionArchive, when built with a store ---------------------------------------------

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
        """Open a stored session, or attach to it if this process has it open already.

        A session this process serves is attached to its one client already (a
        daemon shares a session between clients above the host), so loading it
        again only replays it, from the store once the journal has caught up,
        and resuming it changes nothing: the session and its history go on.
        """
        if self.has_session(session_id):
            if replay and self.store is not None:
                self._stored.wait_for_journal(f"replaying {session_id}")
                self._stored.replay(session_id, sink, after_seq)
            return
        self.restore_session(
            session_id, sink, editor=editor, mcp_servers=mcp_servers, with_frames=False
        )
        if replay:
            # No turn can start before this returns, so nothing overtakes them.
            self._stored.replay(session_id, sink, after_seq)

    def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None
    ) -> tuple[list[SessionInfo], str | None]:
        return self._stored.list_sessions(cwd, cursor)

    def flush_journal(self, timeout: float = JOURNAL_WAIT_S) -> bool:
        """Wait until the frames and histories recorded so far are in the store.

        True once they are (and at once without a store); False if ``timeout``
        passed first. A running turn's frames since its last finished card
        are held until that card or the turn ends, so they are not waited for.
        """
        return self._stored.flush_journal(timeout)

    def delete_session(self, session_id: str) -> None:
        if self.has_session(session_id):
            self.close_session(session_id)
        if self.store is None:
            raise UnknownSession(session_id)
        self.store.sessions.delete(session_id)

    def _open(
        self,
        session_id: str,
        cwd: str,
        sink: FrameSink | SessionSink,
        editor: EditorCapabilities,
        history: tuple[Content, ...],
        mcp_servers: Sequence[McpServerSpec] = (),
        route: int = 0,
        mode: SessionMode | None = None,
        *,
        create_in_store: bool = False,
        shown_call_ids: frozenset[str] = frozenset(),
    ) -> None:
        mode = mode or self.config.default_mode
        client_fs: ClientFilesystem | None = None
        if isinstance(sink, FrameSink):
            sink, client_fs = self._requests.bridge(session_id, sink, editor)
        elif editor.any:
            raise ValueError("editor file access needs a FrameSink to send its requests to")
        self._sessions.add(session_id, route, cwd, mode, client_fs)
        try:
            if create_in_store and self.store is not None:
                self.store.sessions.create(session_id, cwd, self.routes[0].model)
                self.store.sessions.set_mode(session_id, mode)
            if self.journal is not None and self.store is not None:
                # Its frames are numbered on after every number a process reserved for it.
                last_seq = 0 if create_in_store else self.store.frame_log.resume_seq(session_id)
                self.journal.start_session(session_id, last_seq)
            # Started before the session can take a prompt, so its first turn has the tools.
            own_tools = self.mcp.open(session_id, cwd, mcp_servers)
        except BaseException:
            self._sessions.discard(session_id)
            self.mcp.close(session_id)
            raise
        self.directory.tell(EMITTER, AttachSink(session_id, sink))
        if shown_call_ids:  # before the session can start a turn, so before its first card
            self.directory.tell(TRACKER, RememberShownCalls(session_id, shown_call_ids))
        self.directory.tell(
            SUPERVISOR,
            OpenSession(session_id, cwd, history, own_tools.declarations(), route),
        )

    def mode_of(self, session_id: str) -> SessionMode:
        """The session's mode now (the default for a session no longer open)."""
        return self._sessions.mode_of(session_id)

    def session_config(self, session_id: str) -> SessionConfig:
        route, mode = self._sessions.settings(session_id)
        return SessionConfig(self.routes[route].model, self._models, mode)

    def set_model(self, session_id: str, model: str) -> SessionConfig:
        if model not in self._models:
            raise UnknownModel(model, self._models)
        route = route_of(self.routes, model)
        mode = self._sessions.choose_route(session_id, route)
        self.directory.tell(SUPERVISOR, ChooseModel(session_id, route))
        update = config_option_update(model, self._models, mode)
        self.directory.tell(EMITTER, WriteFrames.of(session_id, (update,)))
        if self.store is not None:
            try:
                self.store.sessions.set_model(session_id, model)
            except StoreError as exc:
                logger.error("the model of %s is not kept: %s", session_id, exc)
        return SessionConfig(model, self._models, mode)

    def set_mode(self, session_id: str, mode: SessionMode) -> SessionConfig:
        route = self._sessions.choose_mode(session_id, mode)
        model = self.routes[route].model
        updates = (current_mode_update(mode), config_option_update(model, self._models, mode))
        self.directory.tell(EMITTER, WriteFrames.of(session_id, updates))
        if self.store is not None:
            try:
                self.store.sessions.set_mode(session_id, mode)
            except StoreError as exc:
                logger.error("the mode of %s is not kept: %s", session_id, exc)
        return SessionConfig(model, self._models, mode)

    def session_directories(self) -> set[str]:
        """The directories of the sessions this runtime serves, and, with a store, of every
        session it keeps (other processes' included): what a sandboxed command of one
        session must not see of the others."""
        found = self._sessions.directories()
        if self.store is not None:
            found.update(self.store.sessions.session_directories())
        return found

    def has_session(self, session_id: str) -> bool:
        return self._sessions.has(session_id)

    def prompt(
        self, session_id: str, parts: Sequence[Part], user_message: UserMessage | None = None
    ) -> Future[TurnResult]:
        reply: Future[TurnResult] = Future()
        broken = self.directory.broken
        if broken:
            reply.set_result(TurnResult(None, error="; ".join(broken.values())))
            return reply
        if not self._sessions.taking_prompts(session_id):
            reply.set_result(TurnResult(None, error="the runtime is shutting down"))
            return reply
        if self.store is not None:
            self.store.recovery.require_writable()  # a turn that could not be kept is refused
        self._processes.prompt_started(session_id)
        reply.add_done_callback(lambda _done: self._processes.prompt_done(session_id))
        notes = self.mcp.take_notes(session_id)
        notice = self.config.session_notice
        if notice is not None and self._sessions.first_notice(session_id):
            notes = [notice, *notes]
        if notes:
            # Told before the turn starts, so they come first in the emitter's queue.
            updates = tuple(agent_message_chunk(note) for note in notes)
            self.directory.tell(EMITTER, WriteFrames.of(session_id, updates))
        self.directory.tell(SUPERVISOR, StartTurn(session_id, tuple(parts), reply, user_message))
        return reply

    def tool_process_groups(self) -> list[ProcessGroups]:
        """The process-group trackers of this runtime's tools (``turn_processes``)."""
        return self._processes.tool_process_groups()

    def watched_process_groups(self) -> list[ProcessGroups]:
        """Every process-group tracker whose groups must die with this process: the tools'
        and the MCP servers' (a worker's front kills them should the worker die)."""
        return self._processes.watched_process_groups()

    def kill_tool_processes_now(self) -> None:
        """SIGKILL every tool and MCP server process at once; safe in a signal handler."""
        self._processes.kill_now()

    def cancel(self, session_id: str, reason: str | None = None) -> None:
        self._sessions.require(session_id)
        self.directory.tell(SUPERVISOR, CancelTurn(session_id, reason))

    def answer_permission(
        self, session_id: str, request_id: str, outcome: PermissionOutcome
    ) -> bool:
        check_outcome(outcome)
        self._sessions.require(session_id)
        return self._requests.permissions.answer(session_id, request_id, outcome)

    def answer_editor(self, session_id: str, request_id: str, answer: EditorAnswer) -> bool:
        self._sessions.require(session_id)
        return self._requests.editor.answer(session_id, request_id, answer)

    def close_session(self, session_id: str) -> None:
        closed: Future[None] = Future()
        roles_running = self._sessions.remove(session_id, closed)
        closed.add_done_callback(functools.partial(self._sessions.close_done, session_id))
        # The supervisor detaches the sink once the session's last frames are out.
        self.directory.tell(SUPERVISOR, CloseSession(session_id, closed))
        self._requests.settle_session(session_id)
        self.mcp.close(session_id)  # its servers stop in the background
        if self.store is not None:
            # Another process may open it once released: what it recorded is written first,
            # including what the close itself ends (a running turn's discards and history).
            if roles_running:
                wait_until_closed(closed, f"releasing {session_id}")
            if self.journal is not None:
                self.journal.end_session(session_id)
            self._stored.wait_for_journal(f"releasing {session_id}")
            try:
                self.store.claims.release(session_id)
            except StoreError as exc:
                logger.error("session %s stays marked as served here: %s", session_id, exc)

    def crash_role(self, role: str, session_id: str | None = None) -> None:
        """Make a role raise inside a handler, exactly as a bug would (fault drills)."""
        self.directory.tell(role, CrashRole(f"injected fault in {role}", session_id))

    def active_turns(self) -> list[str]:
        return [
            s.session_id
            for s in list(self.supervisor_state.sessions.values())
            if s.turn is not None
        ]

    def shutdown(self, timeout: float = 10.0) -> None:
        """Cancel running turns (their cards are discarded), stop tool processes, then roles.

        ``timeout`` bounds the wait for all running turns together, so the
        time to shut down does not grow with the number of sessions.
        """
        if not self._sessions.shut():
            return
        pending: list[Future[TurnResult]] = []
        for session in list(self.supervisor_state.sessions.values()):
            turn = session.turn
            if turn is not None:
                pending.append(turn.reply)
                self.directory.tell(SUPERVISOR, CancelTurn(session.session_id))
        deadline = time.monotonic() + timeout
        for reply in pending:
            try:
                reply.result(timeout=max(0.0, deadline - time.monotonic()))
            except Exception as exc:
                logger.warning("turn did not end at shutdown: %r", exc)
        for groups in self.tool_process_groups():
            groups.stop(wait=True)
        self.mcp.shutdown(max(1.0, deadline - time.monotonic()))
        self.reader_state.stop_loop([route.provider for route in self.routes])
        self.directory.stop_all()
        if self.journal is not None and not self.journal.close(JOURNAL_WAIT_S):
            logger.error(
                "the session store did not take the journal's last writes within %.0f s",
                JOURNAL_WAIT_S,
            )
        self.scheduler.stop()
        pool = self.executor_state.pool
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
