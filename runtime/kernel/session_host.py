"""The session-host boundary: what a front end (the ACP agent, a daemon) may ask of sessions.

Everything that crosses it is plain data keyed by session id, so the sessions
behind it can live in this process (``Runtime``), in worker processes behind a
routing front, or on a cluster, without the front end changing:

- in: ``open_session`` / ``prompt`` / ``cancel`` / ``answer_permission`` /
  ``answer_editor`` / ``set_model`` / ``set_mode`` /
  ``close_session`` / ``shutdown``;
- out: one ordered stream per session, delivered to the ``FrameSink`` the
  caller attached when it opened the session: ACP ``session/update`` payloads
  (as dicts, or already encoded as JSON bytes by a host that serialised them
  elsewhere), and requests the session needs answered (permission to run a
  tool, a file read or write through the editor), each with an id that the
  answer quotes.

No callable or future crosses it in the sessions' direction: a request is a
message, and its answer is a call on the host naming the session and the
request. That is what lets a worker process ask for permission, or read an
editor buffer, through a front that only relays bytes.

Ordering guarantees every implementation keeps, per session:

1. The sink receives a session's frames and permission requests one at a
   time, in the order the session produced them; frames of one session
   never reach another session's sink, and every sink call names its
   session. Editor requests come from the running tool while its card is in
   progress, so they may arrive while a frame is being delivered.
2. A prompt's future resolves only after every frame of that turn was handed
   to the sink, and by then every tool-call card opened in the turn has had
   its terminal update (``completed``, ``failed``, or ``failed`` marked
   ``_meta.preparationDiscarded`` for a card that never ran).
3. ``cancel`` ends the running turn: cards not yet terminal are discarded
   (one terminal frame each), then the prompt resolves with stop reason
   ``cancelled``. Cancelling an idle session does nothing.
4. A request is answered at most once; an answer that comes too late (the
   request timed out, or its session was closed) is ignored. Closing a session
   settles its unanswered requests (permission ``cancelled``, editor
   ``EditorFailed``) so no tool waits for an answer that cannot come.
5. After ``close_session`` (its running turn is cancelled as in 3) the sink
   gets nothing more, and every call naming that session raises
   ``UnknownSession``, as do calls naming a session never opened.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from toolprep.messages.content import Part
from toolprep.messages.modes import SessionMode
from toolprep.messages.permissions import PERMISSION_OUTCOMES, PermissionOutcome, check_outcome
from toolprep.messages.sinks import UpdateSink
from toolprep.messages.turns import TurnResult, UserMessage
from toolprep.runtime.mcp.specs import McpServerSpec


class SessionHostError(Exception):
    """The host refused a call; the message says why."""


class UnknownSession(SessionHostError, LookupError):
    """The session id names no open session (never opened, or closed since)."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"Session not found: {session_id}")
        self.session_id = session_id


class SessionLimitReached(SessionHostError):
    """The host serves as many sessions as it may; one must close before another opens."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"Session limit reached: this agent serves at most {limit} open sessions "
            "(--max-sessions); close one with session/close first"
        )
        self.limit = limit


class SessionServedElsewhere(SessionHostError):
    """Another live toolprep process serves the session: only that process may load,
    resume or delete it until it closes the session or ends. ``holder`` names it
    (``pid 1234 on HOST``)."""

    def __init__(self, session_id: str, holder: str) -> None:
        super().__init__(
            f"session {session_id} is served by another live toolprep process ({holder}); "
            "close it there or stop that process first"
        )
        self.session_id = session_id
        self.holder = holder


class StoreReadOnly(SessionHostError):
    """The session store cannot be written (disk full, read-only, locked): stored sessions
    can be listed and loaded, but new sessions and turns are refused until it can be.
    ``cause`` is what the store said."""

    def __init__(self, cause: str) -> None:
        super().__init__(
            f"the session store is read-only: {cause}; new turns are refused until it "
            "can be written"
        )
        self.cause = cause


class NoWorkerAvailable(SessionHostError):
    """Every process that could serve a new session is down and waiting to restart;
    ``retry_after`` says in how many seconds the first of them starts again."""

    def __init__(self, why: str, retry_after: float) -> None:
        super().__init__(f"no worker available: {why}")
        self.retry_after = retry_after


class HostClosed(SessionHostError, RuntimeError):
    """The host was shut down and opens no more sessions."""


class UnknownModel(SessionHostError, ValueError):
    """A session was asked to use a model the host is not configured with."""

    def __init__(self, model: str, models: Sequence[str]) -> None:
        super().__init__(f"Unknown model {model!r}: choose one of {', '.join(models)}")
        self.model = model
        self.models = tuple(models)


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """A session's settings an editor may change: the model its turns start with, its mode.

    ``models`` are every model the host is configured with, in fallback
    order; a turn starts with ``model`` and falls back through the others.
    ``mode`` says which tools run without asking (``messages.modes``).
    """

    model: str
    models: tuple[str, ...]
    mode: SessionMode


@dataclass(frozen=True, slots=True)
class EditorCapabilities:
    """Which ACP ``fs/*`` methods the session's client serves.

    A session opened with either lets its file tools go through the editor
    (unsaved buffers, undo history) by sending ``ReadTextFile`` /
    ``WriteTextFile`` requests to its sink.
    """

    read_text_file: bool = False
    write_text_file: bool = False

    @property
    def any(self) -> bool:
        return self.read_text_file or self.write_text_file


NO_EDITOR = EditorCapabilities()


# --- requests a session sends its caller (commands: the caller is to act) ---------------


@dataclass(frozen=True, slots=True)
class RequestPermission:
    """Ask the user whether a tool call may run; answer with ``answer_permission``.

    ``tool_call`` is the ACP ``ToolCallUpdate`` describing the call (id,
    title, kind, raw input), ready to put into ``session/request_permission``.
    """

    request_id: str
    tool_call: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ReadTextFile:
    """Read ``path`` (absolute) through the editor; answer ``FileRead`` or ``EditorFailed``."""

    request_id: str
    path: str
    line: int | None = None
    limit: int | None = None


@dataclass(frozen=True, slots=True)
class WriteTextFile:
    """Write ``content`` to ``path`` (absolute) through the editor; answer ``FileWritten``."""

    request_id: str
    path: str
    content: str


ClientRequest = RequestPermission | ReadTextFile | WriteTextFile
"""What a session may ask its client while a turn waits (``FrameSink.send_request``)."""


# --- the caller's answers to editor requests (events: what happened) -----------------------


@dataclass(frozen=True, slots=True)
class FileRead:
    content: str


@dataclass(frozen=True, slots=True)
class FileWritten:
    pass


@dataclass(frozen=True, slots=True)
class EditorFailed:
    """The editor could not serve the request; ``reason`` is shown to user and model."""

    reason: str


EditorAnswer = FileRead | FileWritten | EditorFailed


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A stored session as ``list_sessions`` describes it (times in seconds since the epoch)."""

    session_id: str
    cwd: str
    model: str | None
    title: str | None
    created_at: float
    updated_at: float


@runtime_checkable
class FrameSink(UpdateSink, Protocol):
    """Where one session's ordered output goes; the caller supplies it per session.

    Frames of one session never overlap (guarantee 1), but editor requests
    and other sessions' frames may come from other threads at the same time,
    so a sink shared by sessions must be thread-safe. It must not block for
    long: it writes to a connection or a buffer and returns.

    Every method is required, ``UpdateSink``'s included: ``send_update`` takes one ACP
    ``session/update`` payload built in this process, ``send_updates`` a batch of frames
    of any of the sink's sessions, in order, to be written together (an in-process host
    hands it each batch at once).
    """

    def send_encoded_update(self, session_id: str, update_json: bytes) -> None:
        """A payload serialised as JSON by a host elsewhere: relay the bytes as they are."""

    def send_request(self, session_id: str, request: ClientRequest) -> None:
        """A request the session waits on; answer it through the host, quoting its id.

        The answer may be given at once, before this call returns (a client that
        replied before its request was fully handed on): every host takes it.
        """


class SessionHost(Protocol):
    """Sessions keyed by id: the seam between a front end and wherever sessions run."""

    def open_session(
        self,
        cwd: str | Path,
        sink: FrameSink,
        session_id: str | None = None,
        *,
        editor: EditorCapabilities = NO_EDITOR,
        mcp_servers: Sequence[McpServerSpec] = (),
    ) -> str:
        """Open a session working in ``cwd``; its output goes to ``sink``. Returns its id.

        ``mcp_servers`` run where the session runs, for as long as it is open,
        and their tools are the session's; one that cannot be started is left
        out (a warning is logged) and the session opens without its tools.
        Raises ``HostClosed`` after ``shutdown``.
        """

    def prompt(
        self, session_id: str, parts: Sequence[Part], user_message: UserMessage | None = None
    ) -> Future[TurnResult]:
        """Start a turn; the future resolves after the turn's last frame (guarantee 2).

        A prompt while another turn of the session runs resolves with an error
        result; a host that cannot run turns any more resolves it with one too.
        ``user_message``, the prompt as the client sent it, becomes the turn's
        first frames (``user_message_chunk``, one per block) once the turn is
        accepted: they reach the sink like any frame and are kept for replay.

        A prompt the host refuses (``StoreReadOnly``; ``NoWorkerAvailable`` while
        the process serving the session waits to restart) raises, or its future
        fails with that exception, so the editor is told the documented code.
        """

    def cancel(self, session_id: str, reason: str | None = None) -> None:
        """End the running turn, if any, as guarantee 3 describes; ``reason``, if given, is
        said in the session first (a turn nobody asked to stop says why it stopped)."""

    def answer_permission(
        self, session_id: str, request_id: str, outcome: PermissionOutcome
    ) -> bool:
        """Answer a ``RequestPermission``; False if it was no longer waiting."""

    def answer_editor(self, session_id: str, request_id: str, answer: EditorAnswer) -> bool:
        """Answer a ``ReadTextFile`` / ``WriteTextFile``; False if it was no longer waiting."""

    def session_config(self, session_id: str) -> SessionConfig:
        """The session's current settings."""

    def set_model(self, session_id: str, model: str) -> SessionConfig:
        """Start the session's turns with ``model`` from the next one on; returns the settings.

        A running turn keeps its models. The session sends every attached sink
        a ``config_option_update`` (in order with its frames), and a host that
        keeps sessions keeps the choice. Raises ``UnknownModel`` for a model
        not in ``session_config(...).models``.
        """

    def set_mode(self, session_id: str, mode: SessionMode) -> SessionConfig:
        """Run the session's tool calls in ``mode`` from the next call on; returns the settings.

        The session sends every attached sink a ``current_mode_update`` and a
        ``config_option_update`` (in order with its frames), and a host that
        keeps sessions keeps the choice.
        """

    def close_session(self, session_id: str) -> None:
        """Cancel the session's turn and forget the session (guarantees 4 and 5)."""

    def shutdown(self, timeout: float = 10.0) -> None:
        """Cancel every running turn (each prompt resolves), then stop; ``timeout`` bounds it."""


class SessionArchive(Protocol):
    """What a host that keeps sessions beyond its process offers besides ``SessionHost``."""

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
        """Open a stored session again, history included, its output going to ``sink``.

        ``mcp_servers`` are the ones given now (servers are not stored), as for
        ``SessionHost.open_session``.

        With ``replay`` the frames it sent before (those numbered after
        ``after_seq``: a client that has the rest resumes) reach ``sink``
        first, ahead of anything new, before this returns; every card among
        them is terminal (a card a crash left open has been given its discard).
        Raises ``UnknownSession`` if nothing is stored under the id,
        ``ValueError`` if the session is open already.
        """

    def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None
    ) -> tuple[list[SessionInfo], str | None]:
        """Stored sessions, most recently updated first, and the cursor of the next page."""

    def delete_session(self, session_id: str) -> None:
        """Close the session if open and forget it; its id is never used again.

        Raises ``SessionServedElsewhere`` while another live process serves it.
        """


__all__ = [
    "NO_EDITOR",
    "PERMISSION_OUTCOMES",
    "ClientRequest",
    "EditorAnswer",
    "EditorCapabilities",
    "EditorFailed",
    "FileRead",
    "FileWritten",
    "FrameSink",
    "HostClosed",
    "NoWorkerAvailable",
    "ReadTextFile",
    "RequestPermission",
    "SessionArchive",
    "SessionConfig",
    "SessionHost",
    "SessionHostError",
    "SessionInfo",
    "SessionLimitReached",
    "SessionServedElsewhere",
    "StoreReadOnly",
    "UnknownModel",
    "UnknownSession",
    "WriteTextFile",
    "check_outcome",
]
