"""How the in-process host (``Runtime``) keeps the boundary's request/answer promises.

Inside the process the roles ask for permission with a future and file tools
call a ``ClientFilesystem``; across the boundary both are messages with ids
(``session_host``). ``ClientRequests`` turns one into the other: it sends the
request to the session's ``FrameSink``, keeps the future the role waits on
under the request id, and completes it when the caller answers through the
host. Frames need no translation, so the emitter calls the caller's own
``send_update``: the boundary adds no hop to the path every frame takes.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, Generic, TypeVar, assert_never

from toolprep.runtime.kernel.session_host import (
    ClientRequest,
    EditorAnswer,
    EditorCapabilities,
    EditorFailed,
    FileRead,
    FileWritten,
    FrameSink,
    ReadTextFile,
    RequestPermission,
    WriteTextFile,
)
from toolprep.runtime.tools.base import ToolError

logger = logging.getLogger(__name__)

EDITOR_TIMEOUT_S = 30.0
"""How long a file tool waits for the editor before failing the call."""

SESSION_CLOSED = "the session was closed before the editor answered"

T = TypeVar("T")


class PendingAnswers(Generic[T]):
    """Requests sent to sessions' callers that still wait for an answer, by session and id."""

    def __init__(self, prefix: str, fallback: T) -> None:
        self._prefix = prefix
        self._fallback = fallback
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._waiting: dict[str, dict[str, Future[T]]] = {}

    def send(self, session_id: str, deliver: Callable[[str], None]) -> tuple[str, Future[T]]:
        """Register a request, then ``deliver(request_id)``; a failed delivery unregisters it.

        Registering first means an answer given while ``deliver`` still runs
        (a caller answering on the spot) finds its request.
        """
        answer: Future[T] = Future()
        with self._lock:
            request_id = f"{self._prefix}{next(self._ids)}"
            self._waiting.setdefault(session_id, {})[request_id] = answer
        try:
            deliver(request_id)
        except BaseException:
            self.abandon(session_id, request_id)
            raise
        return request_id, answer

    def answer(self, session_id: str, request_id: str, value: T) -> bool:
        answer = self._take(session_id, request_id)
        return answer is not None and _settle(answer, value)

    def abandon(self, session_id: str, request_id: str) -> None:
        """Stop waiting (timed out, or never delivered): a later answer is ignored."""
        self._take(session_id, request_id)

    def _take(self, session_id: str, request_id: str) -> Future[T] | None:
        with self._lock:
            waiting = self._waiting.get(session_id)
            if waiting is None:
                return None
            answer = waiting.pop(request_id, None)
            if not waiting:
                del self._waiting[session_id]
        return answer

    def settle_session(self, session_id: str) -> None:
        """The session is gone: whoever still waits gets the fallback answer."""
        with self._lock:
            waiting = self._waiting.pop(session_id, {})
        for answer in waiting.values():
            _settle(answer, self._fallback)


def _settle(future: Future[T], value: T) -> bool:
    try:
        future.set_result(value)
    except Exception as exc:  # already settled (a race), or a failing callback
        logger.warning("answer %r not delivered: %r", value, exc)
        return False
    return True


class ClientRequests:
    """The requests of every session of one host: permissions and editor file access."""

    def __init__(self, editor_timeout: float = EDITOR_TIMEOUT_S) -> None:
        self.permissions: PendingAnswers[str] = PendingAnswers("permission_", "cancelled")
        self.editor: PendingAnswers[EditorAnswer] = PendingAnswers(
            "fs_", EditorFailed(SESSION_CLOSED)
        )
        self._editor_timeout = editor_timeout

    def bridge(
        self, session_id: str, sink: FrameSink, editor: EditorCapabilities
    ) -> tuple[BridgedSink, EditorFilesystem | None]:
        """The emitter's sink and the file tools' filesystem for a session opened over ``sink``."""
        client_fs = (
            EditorFilesystem(session_id, sink, self.editor, editor, self._editor_timeout)
            if editor.any
            else None
        )
        return BridgedSink(sink, self.permissions), client_fs

    def settle_session(self, session_id: str) -> None:
        self.permissions.settle_session(session_id)
        self.editor.settle_session(session_id)


class BridgedSink:
    """The emitter's view of a ``FrameSink``: frames straight through, permissions as messages.

    The sink's own ``send_update`` and ``send_updates`` are kept here as they are, so
    that the bridges of the sessions one sink serves share its ``send_updates`` and the
    emitter writes their frames together.
    """

    __slots__ = ("_permissions", "_sink", "send_update", "send_updates")

    send_update: Callable[[str, dict[str, Any]], None]
    send_updates: Callable[[Sequence[tuple[str, dict[str, Any]]]], None]

    def __init__(self, sink: FrameSink, permissions: PendingAnswers[str]) -> None:
        self.send_update = sink.send_update  # the caller's own methods: no extra call
        self.send_updates = sink.send_updates
        self._sink = sink
        self._permissions = permissions

    def request_permission(
        self, session_id: str, tool_call: dict[str, Any], request: Any
    ) -> Future[str]:
        def deliver(request_id: str) -> None:
            self._sink.send_request(session_id, RequestPermission(request_id, tool_call))

        return self._permissions.send(session_id, deliver)[1]


class EditorFilesystem:
    """``ClientFilesystem`` whose reads and writes are requests to the session's caller."""

    def __init__(
        self,
        session_id: str,
        sink: FrameSink,
        pending: PendingAnswers[EditorAnswer],
        editor: EditorCapabilities,
        timeout: float,
    ) -> None:
        self._session_id = session_id
        self._sink = sink
        self._pending = pending
        self.can_read = editor.read_text_file
        self.can_write = editor.write_text_file
        self._timeout = timeout

    def read_text_file(self, path: str, line: int | None = None, limit: int | None = None) -> str:
        answer = self._ask("fs/read_text_file", lambda rid: ReadTextFile(rid, path, line, limit))
        match answer:
            case FileRead(content=content):
                return content
            case FileWritten():
                raise ToolError("the editor answered fs/read_text_file without text content")
            case EditorFailed(reason=reason):
                raise ToolError(reason)
            case _:
                assert_never(answer)

    def write_text_file(self, path: str, content: str) -> None:
        answer = self._ask("fs/write_text_file", lambda rid: WriteTextFile(rid, path, content))
        match answer:
            case FileWritten() | FileRead():
                return
            case EditorFailed(reason=reason):
                raise ToolError(reason)
            case _:
                assert_never(answer)

    def _ask(self, method: str, build: Callable[[str], ClientRequest]) -> EditorAnswer:
        def deliver(request_id: str) -> None:
            self._sink.send_request(self._session_id, build(request_id))

        try:
            request_id, answer = self._pending.send(self._session_id, deliver)
        except Exception as exc:
            raise ToolError(f"the editor did not answer {method}: {exc!r}") from None
        try:
            return answer.result(timeout=self._timeout)
        except TimeoutError as exc:
            self._pending.abandon(self._session_id, request_id)
            raise ToolError(f"the editor did not answer {method}: {exc!r}") from None


__all__ = [
    "EDITOR_TIMEOUT_S",
    "BridgedSink",
    "ClientRequests",
    "EditorFilesystem",
    "PendingAnswers",
]
