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
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolprep.actors.acp_emitter import AcpEmitter, EmitterState, SessionSink
from toolprep.actors.base import EMITTER, EXECUTOR, READER, SUPERVISOR, TRACKER, RoleActor
from toolprep.actors.directory import RoleDirectory
from toolprep.actors.preparation_tracker import PreparationTracker, TrackerState
from toolprep.actors.session_supervisor import SessionSupervisor
from toolprep.actors.stream_reader import ReaderState, StreamReader
from toolprep.actors.supervisor_state import SupervisorState, TurnConfig
from toolprep.actors.tool_executor import ExecutorState, ToolExecutor
from toolprep.messages.content import Content, FunctionCallPart, FunctionResponsePart, Part
from toolprep.messages.frames import agent_message_chunk, config_option_update
from toolprep.messages.modes import DEFAULT_MODE, SessionMode, check_mode, current_mode_update
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
from toolprep.runtime.config import ModelRoute
from toolprep.runtime.hosting.local_requests import ClientRequests
from toolprep.runtime.kernel.compaction import CompactionPolicy
from toolprep.runtime.kernel.event_loops import EventLoopChoice, check_event_loop
from toolprep.runtime.kernel.retry import RetryPolicy
from toolprep.runtime.kernel.scheduler import Scheduler
from toolprep.runtime.kernel.session_host import (
    NO_EDITOR,
    EditorAnswer,
    EditorCapabilities,
    FrameSink,
    HostClosed,
    SessionConfig,
    SessionInfo,
    UnknownModel,
    UnknownSession,
    check_outcome,
)
from toolprep.runtime.mcp import McpConfig, McpServerSpec
from toolprep.runtime.mcp.hub import McpHub
from toolprep.runtime.store import SessionStore, StoredSession, StoreError
from toolprep.runtime.store.journal import StoreJournal
from toolprep.runtime.store.numbering import NumberingJournal
from toolprep.runtime.tools.base import ClientFilesystem, PermissionOutcome
from toolprep.runtime.tools.process_groups import ProcessGroups
from toolprep.runtime.tools.registry import ToolRegistry, default_registry

logger = logging.getLogger(__name__)

JOURNAL_WAIT_S = 5.0
"""How long reading the store, releasing a session or shutting down waits for the journal."""

CLOSE_WAIT_S = 5.0
"""How long opening a session id again waits for the roles to finish its earlier close."""


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
    ) -> None:
        """``store``, if given, keeps every session's frames and history (``restore_session``
        opens one again); the caller owns it and closes it after ``shutdown``. ``mcp``
        bounds and scrubs the MCP servers sessions are opened with."""
        if not routes:
            raise ValueError("at least one model route is needed")
        self.store = store
        self.config = config or RuntimeConfig()
        check_event_loop(self.config.event_loop)  # before any role's thread starts
        self.registry = registry or default_registry()
        self.mcp = McpHub(mcp)
        self.routes = tuple(routes)
        self.scheduler = Scheduler()
        self.directory = self._make_directory()
        self.tracker_state = TrackerState()
        self.journal = StoreJournal(store) if store else None
        # Without a store the frames are numbered all the same: a client's afterSeq then
        # resumes from the daemon's copy of the live session.
        self.emitter_state = EmitterState(journal=self.journal or NumberingJournal())
        self.executor_state = ExecutorState()
        self.reader_state = ReaderState(event_loop=self.config.event_loop)
        self.supervisor_state = SupervisorState()
        # Each open session and the route its turns start with (its chosen model).
        self._sessions: dict[str, int] = {}
        self._models = tuple(dict.fromkeys(route.model for route in self.routes))
        self._cwds: dict[str, str] = {}  # each open session's directory
        self._noticed: set[str] = set()  # sessions shown config.session_notice
        self._modes: dict[str, SessionMode] = {}  # each open session's mode
        self._client_fs: dict[str, ClientFilesystem] = {}
        self._requests = ClientRequests()
        self._outstanding: Counter[str] = Counter()
        self._closing: dict[str, Future[None]] = {}  # closes the roles have not finished
        self._lock = threading.Lock()
        self._closed = False
        self._start_roles()

    def _make_directory(self) -> RoleDirectory:
        return RoleDirectory(
            max_restarts=self.config.max_restarts, within_seconds=self.config.restart_window
        )

    def _kind_of(self, tool_name: str) -> str:
        tool = self.registry.get(tool_name)
        return tool.kind if tool is not None else "other"

    def role_specs(self) -> dict[str, tuple[type[RoleActor], tuple[Any, ...], dict[str, Any]]]:
        """Each role's actor class and constructor arguments (after the directory).

        One table serves both the actor runtime and anything that runs the same
        handlers another way (the no-actor benchmark baseline), so the two
        cannot drift apart.
        """
        cfg = self.config
        turn_config = TurnConfig(
            system_prompt=cfg.system_prompt,
            max_tokens=cfg.max_tokens,
            max_requests_per_turn=cfg.max_requests_per_turn,
            retry=cfg.retry,
            compaction=cfg.compaction,
        )
        executor_options = {
            "workers": cfg.tool_workers,
            "timeout": cfg.tool_timeout,
            "client_fs_for": self._client_fs.get,
            "session_tool": self.mcp.tool,
            "mode_of": self.mode_of,
        }
        return {
            EMITTER: (AcpEmitter, (self.emitter_state,), {}),
            EXECUTOR: (
                ToolExecutor,
                (self.executor_state, self.registry, self.scheduler),
                executor_options,
            ),
            TRACKER: (PreparationTracker, (self.tracker_state, self._kind_of), {}),
            READER: (StreamReader, (self.reader_state, self.routes), {}),
            SUPERVISOR: (
                SessionSupervisor,
                (
                    self.supervisor_state,
                    self.routes,
                    self.registry.declarations(),
                    self.scheduler,
                    turn_config,
                ),
                {},
            ),
        }

    def _start_roles(self) -> None:
        d = self.directory
        for role, (cls, args, options) in self.role_specs().items():
            d.register(role, functools.partial(cls.start, d, *args, **options))

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
        self._await_close(session_id)
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
        with self._lock:
            if session_id in self._sessions:
                raise ValueError(f"a session with this id is already open: {session_id}")
        # Its last life in this process must be over before the store is read: its final
        # frames and history go to the journal on the way out.
        self._await_close(session_id)
        # First: a card's queued terminal update must land before close_open_cards discards it.
        self._wait_for_journal(f"restoring {session_id}")
        self.store.claims.claim(session_id)  # refused while another live process serves it
        self.store.cards.close_open_cards(session_id)  # what a crash of its last process left open
        stored = self.store.sessions.load(session_id, frames=with_frames)
        route = self._route_of(stored.info.model)
        mode = self._stored_mode(session_id)
        # Every id a card of it showed, and every call id in its history (a card's frames may
        # be lost with a crash): a provider that numbers its ids the same way each process
        # (the replay does) must not open a card the editor would take for an old one.
        shown = self.store.frame_log.shown_call_ids(session_id) | _history_call_ids(stored.history)
        self._open(
            session_id,
            stored.info.cwd,
            sink,
            editor,
            stored.history,
            mcp_servers,
            route,
            mode,
            shown_call_ids=shown,
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
                self._wait_for_journal(f"replaying {session_id}")
                for frame in self.store.frame_log.encoded_frames(session_id, after_seq):
                    sink.send_encoded_update(session_id, frame)
            return
        self.restore_session(
            session_id, sink, editor=editor, mcp_servers=mcp_servers, with_frames=False
        )
        if replay and self.store is not None:
            # No turn can start before this returns, so nothing overtakes them.
            for frame in self.store.frame_log.encoded_frames(session_id, after_seq):
                sink.send_encoded_update(session_id, frame)

    def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None
    ) -> tuple[list[SessionInfo], str | None]:
        if self.store is None:
            return [], None
        self._wait_for_journal("listing sessions")
        return self.store.sessions.list_sessions(cwd, cursor)

    def flush_journal(self, timeout: float = JOURNAL_WAIT_S) -> bool:
        """Wait until the frames and histories recorded so far are in the store.

        True once they are (and at once without a store); False if ``timeout``
        passed first. A running turn's frames since its last finished card
        are held until that card or the turn ends, so they are not waited for.
        """
        return self.journal is None or self.journal.flush(timeout)

    def _wait_for_journal(self, doing: str) -> None:
        if not self.flush_journal():
            logger.warning(
                "%s before the journal's last writes: the store did not take them within %.0f s",
                doing,
                JOURNAL_WAIT_S,
            )

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
        with self._lock:
            if self._closed:
                raise HostClosed("the runtime is shut down")
            if session_id in self._sessions:
                raise ValueError(f"a session with this id is already open: {session_id}")
            self._sessions[session_id] = route
            self._cwds[session_id] = cwd
            self._modes[session_id] = mode
            if client_fs is not None:
                self._client_fs[session_id] = client_fs
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
            with self._lock:
                self._sessions.pop(session_id, None)
                self._cwds.pop(session_id, None)
                self._modes.pop(session_id, None)
                self._client_fs.pop(session_id, None)
            self.mcp.close(session_id)
            raise
        self.directory.tell(EMITTER, AttachSink(session_id, sink))
        if shown_call_ids:  # before the session can start a turn, so before its first card
            self.directory.tell(TRACKER, RememberShownCalls(session_id, shown_call_ids))
        self.directory.tell(
            SUPERVISOR,
            OpenSession(session_id, cwd, history, own_tools.declarations(), route),
        )

    def _route_of(self, model: str | None) -> int:
        """The first route serving ``model``; a model no longer configured gets the default."""
        for index, route in enumerate(self.routes):
            if route.model == model:
                return index
        if model is not None:
            logger.warning("stored model %r is not configured; using %s", model, self._models[0])
        return 0

    def _stored_mode(self, session_id: str) -> SessionMode:
        """The mode the store kept for the session; the default if it kept none it knows."""
        assert self.store is not None
        stored = self.store.sessions.mode_of(session_id)
        if stored is None:
            return self.config.default_mode
        try:
            return check_mode(stored)
        except ValueError as exc:
            default = self.config.default_mode
            logger.warning("stored mode of %s is unknown (%s); using %s", session_id, exc, default)
            return self.config.default_mode

    def mode_of(self, session_id: str) -> SessionMode:
        """The session's mode now (the default for a session no longer open)."""
        with self._lock:
            return self._modes.get(session_id, self.config.default_mode)

    def session_config(self, session_id: str) -> SessionConfig:
        with self._lock:
            route = self._sessions.get(session_id)
            mode = self._modes.get(session_id, self.config.default_mode)
        if route is None:
            raise UnknownSession(session_id)
        return SessionConfig(self.routes[route].model, self._models, mode)

    def set_model(self, session_id: str, model: str) -> SessionConfig:
        if model not in self._models:
            raise UnknownModel(model, self._models)
        route = self._route_of(model)
        with self._lock:
            if session_id not in self._sessions:
                raise UnknownSession(session_id)
            self._sessions[session_id] = route
            mode = self._modes[session_id]
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
        with self._lock:
            route = self._sessions.get(session_id)
            if route is None:
                raise UnknownSession(session_id)
            self._modes[session_id] = mode
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
        with self._lock:
            found = set(self._cwds.values())
        if self.store is not None:
            found.update(self.store.sessions.session_directories())
        return found

    def has_session(self, session_id: str) -> bool:
        with self._lock:
            return session_id in self._sessions

    def prompt(
        self, session_id: str, parts: Sequence[Part], user_message: UserMessage | None = None
    ) -> Future[TurnResult]:
        reply: Future[TurnResult] = Future()
        broken = self.directory.broken
        if broken:
            reply.set_result(TurnResult(None, error="; ".join(broken.values())))
            return reply
        with self._lock:
            if self._closed:
                reply.set_result(TurnResult(None, error="the runtime is shutting down"))
                return reply
            if session_id not in self._sessions:
                raise UnknownSession(session_id)
        if self.store is not None:
            self.store.recovery.require_writable()  # a turn that could not be kept is refused
        with self._lock:
            self._outstanding[session_id] += 1
        reply.add_done_callback(lambda _done: self._prompt_done(session_id))
        notes = self.mcp.take_notes(session_id)
        notice = self.config.session_notice
        if notice is not None:
            with self._lock:
                first = session_id not in self._noticed
                self._noticed.add(session_id)
            if first:
                notes = [notice, *notes]
        if notes:
            # Told before the turn starts, so they come first in the emitter's queue.
            updates = tuple(agent_message_chunk(note) for note in notes)
            self.directory.tell(EMITTER, WriteFrames.of(session_id, updates))
        self.directory.tell(SUPERVISOR, StartTurn(session_id, tuple(parts), reply, user_message))
        return reply

    def _prompt_done(self, session_id: str) -> None:
        """Stop the session's leftover tool processes once no prompt of it is outstanding.

        Counting prompts rather than reacting to each reply keeps a prompt
        that is refused (another one is running) from stopping the running
        turn's processes. Runs on the emitter's thread, so it must not block.
        """
        with self._lock:
            self._outstanding[session_id] -= 1
            if self._outstanding[session_id] > 0:
                return
            del self._outstanding[session_id]
        for groups in self.tool_process_groups():
            groups.stop(session_id, wait=False)

    def tool_process_groups(self) -> list[ProcessGroups]:
        """The process-group trackers of this runtime's tools: a tool whose calls may leave
        processes behind keeps them in a ``ProcessGroups`` named ``processes``.

        Runs after every prompt, so the attribute is looked up, not matched against a
        runtime-checkable protocol (an ``isinstance`` that inspects every member each time).
        """
        found: list[ProcessGroups] = []
        for name in self.registry.names():
            groups = getattr(self.registry.get(name), "processes", None)
            if isinstance(groups, ProcessGroups) and groups not in found:
                found.append(groups)
        return found

    def watched_process_groups(self) -> list[ProcessGroups]:
        """Every process-group tracker whose groups must die with this process: the tools'
        and the MCP servers' (a worker's front kills them should the worker die)."""
        return [*self.tool_process_groups(), self.mcp.processes]

    def kill_tool_processes_now(self) -> None:
        """SIGKILL every tool and MCP server process at once; safe in a signal handler."""
        for groups in self.watched_process_groups():
            groups.kill_now()

    def _require(self, session_id: str) -> None:
        with self._lock:
            if session_id not in self._sessions:
                raise UnknownSession(session_id)

    def cancel(self, session_id: str) -> None:
        self._require(session_id)
        self.directory.tell(SUPERVISOR, CancelTurn(session_id))

    def answer_permission(
        self, session_id: str, request_id: str, outcome: PermissionOutcome
    ) -> bool:
        check_outcome(outcome)
        self._require(session_id)
        return self._requests.permissions.answer(session_id, request_id, outcome)

    def answer_editor(self, session_id: str, request_id: str, answer: EditorAnswer) -> bool:
        self._require(session_id)
        return self._requests.editor.answer(session_id, request_id, answer)

    def close_session(self, session_id: str) -> None:
        closed: Future[None] = Future()
        with self._lock:
            if session_id not in self._sessions:
                raise UnknownSession(session_id)
            del self._sessions[session_id]
            self._cwds.pop(session_id, None)
            self._noticed.discard(session_id)
            self._modes.pop(session_id, None)
            self._client_fs.pop(session_id, None)
            self._closing[session_id] = closed  # in the same step, so a reopen sees it
            roles_running = not self._closed
        closed.add_done_callback(functools.partial(self._close_done, session_id))
        # The supervisor detaches the sink once the session's last frames are out.
        self.directory.tell(SUPERVISOR, CloseSession(session_id, closed))
        self._requests.settle_session(session_id)
        self.mcp.close(session_id)  # its servers stop in the background
        if self.store is not None:
            # Another process may open it once released: what it recorded is written first,
            # including what the close itself ends (a running turn's discards and history).
            if roles_running:
                self._wait_until_closed(closed, f"releasing {session_id}")
            if self.journal is not None:
                self.journal.end_session(session_id)
            self._wait_for_journal(f"releasing {session_id}")
            try:
                self.store.claims.release(session_id)
            except StoreError as exc:
                logger.error("session %s stays marked as served here: %s", session_id, exc)

    def _close_done(self, session_id: str, closed: Future[None]) -> None:
        """Runs on the emitter's thread once it detached the sink; must not block."""
        with self._lock:
            if self._closing.get(session_id) is closed:
                del self._closing[session_id]

    def _wait_until_closed(self, closed: Future[None], doing: str) -> bool:
        """False, and a warning, if the roles did not finish the close in ``CLOSE_WAIT_S``."""
        try:
            closed.result(timeout=CLOSE_WAIT_S)
        except TimeoutError:
            logger.warning(
                "%s although its close did not finish within %.0f s", doing, CLOSE_WAIT_S
            )
            return False
        return True

    def _await_close(self, session_id: str) -> None:
        """Wait until the roles finished closing ``session_id``, if it was just closed.

        ``close_session`` only tells the supervisor; the sink is detached later,
        by the emitter, once the supervisor has forgotten the session. A session
        opened under the same id before then would have its new sink detached by
        that late ``DetachSink`` (its turns' frames lost), be forgotten when the
        old turn ends, and get the old turn's discards. Waiting orders the old
        session's clean-up before anything the new one sends. Should the close
        not finish in ``CLOSE_WAIT_S`` (a role that stopped taking messages),
        the open goes ahead rather than leave the id unusable.
        """
        with self._lock:
            closing = self._closing.get(session_id)
            if closing is None or self._closed:
                return
        if not self._wait_until_closed(closing, f"opening {session_id} again"):
            self._close_done(session_id, closing)

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
        with self._lock:
            if self._closed:
                return
            self._closed = True
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


def _history_call_ids(history: Sequence[Content]) -> frozenset[str]:
    """The ids of the tool calls and results in a session's history."""
    ids: set[str] = set()
    for content in history:
        for part in content.parts:
            if isinstance(part, FunctionCallPart):
                ids.add(part.function_call.id)
            elif isinstance(part, FunctionResponsePart):
                ids.add(part.function_response.id)
    return frozenset(ids)
