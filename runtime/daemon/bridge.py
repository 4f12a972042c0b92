"""``toolprep connect``'s pump: an editor's stdio and a daemon's WebSocket, message for message.

Each stdin line becomes one WebSocket text frame and each frame one stdout
line, byte for byte: the bridge only splits lines (``LineTransport``, which
also bounds the memory an endless line can cost), so what the editor and
the daemon say to each other is never re-encoded or reordered here.

It does read each message's envelope (``_Outstanding``), for one thing: the
end of stdin half-closes. A client that pipes its requests in and closes
stdin (``printf ... | toolprep connect``) still wants their replies, and
closing the WebSocket at once used to drop some of them, or all. So at the
end of stdin nothing more is sent, and the connection stays open until
every request forwarded has its reply on stdout, or ``reply_timeout_s`` has
passed (then one line says how many went unanswered, and the exit status is
1). The same bookkeeping finds the replies that open a session, after which
a ``notice`` (if given) is shown in that session.

Its limit on editor lines is the daemon's own (``connect`` reads it from the
handshake response, ``message_limit``): a line over it is not forwarded, and
the editor gets the error reply ``toolprep acp`` gives for it, so the bridge
and its sessions go on where the daemon would have closed the connection.

Two threads pump, one per direction; the first end either of them meets
(or a stop signal, seen by the main thread) decides how the connection is
closed and what the process reports: the end of stdin closes the WebSocket
normally once the replies are in, a close from the daemon is reported with
its code and reason.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import IO, Any, Final, Literal, assert_never

import orjson
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode
from websockets.sync.client import ClientConnection

from toolprep.runtime.acp.jsonrpc_transport import oversized_error
from toolprep.runtime.acp.line_transport import LineTransport
from toolprep.runtime.acp.transport import SkippedMessage
from toolprep.runtime.daemon.serve_options import DEFAULT_REPLY_TIMEOUT_S

__all__ = ["BridgeEnd", "BridgeOutcome", "notice_frame", "run_bridge"]

logger = logging.getLogger(__name__)

BridgeEnd = Literal[
    "editor-closed",  # stdin ended and every reply is out, or stdout is gone: the editor left
    "replies-missing",  # stdin ended and some replies did not come within the reply timeout
    "stopped",  # SIGTERM or SIGINT
    "daemon-message-too-big",
    "daemon-closed",  # the daemon sent a close frame
    "connection-lost",  # the connection broke with no close frame from the daemon
]

_STOP_POLL_S: Final = 0.1
_READER_JOIN_S: Final = 30.0
_REQUEST_PREFIX: Final = b'{"jsonrpc":"2.0","method":'
"""How the daemon's own encoder starts a message that has a method: skipped unparsed."""
_OPENING: Final = frozenset({"session/new", "session/load", "session/resume"})


@dataclass(frozen=True, slots=True)
class BridgeOutcome:
    """How the bridge ended; ``detail`` says it in words for the one-line report."""

    end: BridgeEnd
    detail: str = ""

    @property
    def exit_status(self) -> int:
        """0 when the editor (or a signal) ended it, 1 when the daemon side did."""
        match self.end:
            case "editor-closed" | "stopped":
                return 0
            case "replies-missing" | "daemon-message-too-big" | "daemon-closed" | "connection-lost":
                return 1
            case _:
                assert_never(self.end)


class _Ending:
    """The first end reported wins; the main thread waits for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._outcome: BridgeOutcome | None = None
        self.reached = threading.Event()

    def report(self, outcome: BridgeOutcome) -> None:
        with self._lock:
            if self._outcome is None:
                self._outcome = outcome
                self.reached.set()

    @property
    def outcome(self) -> BridgeOutcome | None:
        with self._lock:
            return self._outcome


class _Outstanding:
    """The requests forwarded to the daemon that have no reply on stdout yet.

    Keyed by id; each remembers its method and the session it names, so that a reply
    that opens a session is known as one. Ids that cannot match a reply (null, or not
    a string or a number) are not kept.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._waiting: dict[Hashable, tuple[str, str | None]] = {}

    def sent(self, line: bytes) -> None:
        for message in _messages(line):
            method, request_id = message.get("method"), message.get("id")
            if isinstance(method, str) and _is_id(request_id):
                params = message.get("params")
                session = params.get("sessionId") if isinstance(params, dict) else None
                with self._changed:
                    self._waiting[request_id] = (
                        method,
                        session if isinstance(session, str) else None,
                    )

    def answered(self, frame: bytes) -> list[str]:
        """Strike the replies in ``frame`` off; the sessions they opened."""
        opened: list[str] = []
        with self._changed:
            if not self._waiting:
                return opened  # nothing it could answer: not worth parsing
        if frame.startswith(_REQUEST_PREFIX):
            return opened  # a notification or a request of the daemon's, not a reply
        for message in _messages(frame):
            if "method" in message or not _is_id(message.get("id")):
                continue
            with self._changed:
                request = self._waiting.pop(message["id"], None)
                self._changed.notify_all()
            if request is None or request[0] not in _OPENING:
                continue
            result = message.get("result")
            session = result.get("sessionId") if isinstance(result, dict) else None
            session = session if isinstance(session, str) else request[1]
            if session is not None and isinstance(result, dict):
                opened.append(session)
        return opened

    def wait_answered(self, timeout_s: float, ending: _Ending) -> int:
        """Wait until every request has its reply, or ``timeout_s`` passed, or the bridge
        ended otherwise; how many are still without one."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self._waiting and not ending.reached.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(min(left, _STOP_POLL_S))
            return len(self._waiting)


def _is_id(value: object) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def _messages(data: bytes) -> list[dict[str, Any]]:
    """The JSON-RPC objects in one line or frame (a batch is a list of them); none if it is
    not JSON: that is for the receiving side to answer."""
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        return []
    items = parsed if isinstance(parsed, list) else [parsed]
    return [item for item in items if isinstance(item, dict)]


def notice_frame(session_id: str, text: str) -> bytes:
    """A ``session/update`` showing ``text`` in the session as an agent message, set apart
    in brackets as the agent's own notices are."""
    update = {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": f"\n[{text}]\n"},
    }
    return orjson.dumps(
        {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {"sessionId": session_id, "update": update},
        }
    )


def run_bridge(
    socket: ClientConnection,
    stdin: IO[bytes],
    stdout: IO[bytes],
    max_message_bytes: int,
    stop_requested: Callable[[], bool],
    *,
    reply_timeout_s: float = DEFAULT_REPLY_TIMEOUT_S,
    notice: str | None = None,
) -> BridgeOutcome:
    """Pump both ways until one side ends; close the WebSocket accordingly; say how it ended.

    ``stdin`` should be unbuffered: its reader thread may still be blocked
    reading when the process exits. ``notice``, if given, is shown in every
    session this connection opens (new, loaded or resumed), right after its reply.
    """
    lines = _SerialLines(stdin, stdout, max_message_bytes)
    ending = _Ending()
    outstanding = _Outstanding()
    to_daemon = threading.Thread(
        target=_editor_to_daemon,
        args=(lines, socket, outstanding, reply_timeout_s, ending),
        name="connect-stdin",
        daemon=True,
    )
    to_editor = threading.Thread(
        target=_daemon_to_editor,
        args=(socket, lines, outstanding, notice, ending),
        name="connect-stdout",
        daemon=True,
    )
    to_daemon.start()
    to_editor.start()
    while not ending.reached.wait(_STOP_POLL_S):
        if stop_requested():
            ending.report(BridgeOutcome("stopped"))
    outcome = ending.outcome
    assert outcome is not None
    _close(socket, outcome)
    to_editor.join(_READER_JOIN_S)  # ends once the socket is closed
    lines.close_output()
    return outcome


def _close(socket: ClientConnection, outcome: BridgeOutcome) -> None:
    """Close the WebSocket the way the end calls for (a no-op once the daemon closed it)."""
    match outcome.end:
        case "editor-closed" | "replies-missing":
            socket.close(CloseCode.NORMAL_CLOSURE)
        case "stopped":
            socket.close(CloseCode.GOING_AWAY, "the bridge was stopped")
        case "daemon-message-too-big" | "daemon-closed" | "connection-lost":
            socket.close()
        case _:
            assert_never(outcome.end)


def _editor_to_daemon(
    lines: LineTransport,
    socket: ClientConnection,
    outstanding: _Outstanding,
    reply_timeout_s: float,
    ending: _Ending,
) -> None:
    for line in lines.incoming():
        if isinstance(line, SkippedMessage):
            if not _refuse_oversized(lines, line):
                ending.report(BridgeOutcome("editor-closed"))
                return
            continue
        if not line.strip():
            continue  # a blank line carries no message
        outstanding.sent(line)  # before it can be answered
        try:
            socket.send(line, text=True)
        except ConnectionClosed:
            return  # the other thread reports how the connection ended
    # Half-closed: nothing more to send, but the replies to what was sent are still due.
    unanswered = outstanding.wait_answered(reply_timeout_s, ending)
    if unanswered:
        ending.report(
            BridgeOutcome(
                "replies-missing",
                f"stdin ended with {unanswered} request(s) still unanswered after waiting "
                f"{reply_timeout_s:g} s for their replies; closed the connection without "
                "them (the daemon goes on with their sessions: load one to see how it "
                "went, or pass a longer --reply-timeout)",
            )
        )
    ending.report(BridgeOutcome("editor-closed"))


def _refuse_oversized(lines: LineTransport, line: SkippedMessage) -> bool:
    """Answer an editor line over the limit as the agent would, and say so once on stderr;
    the bridge goes on. False when stdout is gone."""
    size = f" of {line.size} bytes" if line.size is not None else ""
    print(
        f"toolprep connect: the editor sent a message{size} over the "
        f"{lines.max_message_bytes}-byte message limit; it was not forwarded and was answered "
        "with an error (-32600)",
        file=sys.stderr,
        flush=True,
    )
    try:
        lines.write(orjson.dumps(oversized_error(lines.max_message_bytes)) + b"\n")
    except (OSError, ValueError):
        return False
    return True


class _SerialLines(LineTransport):
    """The editor's stdio, written by both pumps: one message at a time."""

    def __init__(self, stdin: IO[bytes], stdout: IO[bytes], max_bytes: int) -> None:
        super().__init__(stdin, stdout, max_bytes)
        self._write_lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self._write_lock:
            super().write(data)


def _daemon_to_editor(
    socket: ClientConnection,
    lines: LineTransport,
    outstanding: _Outstanding,
    notice: str | None,
    ending: _Ending,
) -> None:
    while True:
        try:
            frame = socket.recv(decode=False)
        except ConnectionClosed as closed:
            ending.report(_closed_outcome(closed, lines.max_message_bytes))
            return
        data = bytes(frame)
        try:
            lines.write(data + b"\n")
            opened = outstanding.answered(data)  # once written: the half-close waits for it
            if notice is not None:
                for session_id in opened:
                    lines.write(notice_frame(session_id, notice) + b"\n")
        except (OSError, ValueError) as exc:
            logger.info("stdout is gone (%s): the editor left", exc)
            ending.report(BridgeOutcome("editor-closed"))
            return


def _closed_outcome(closed: ConnectionClosed, max_message_bytes: int) -> BridgeOutcome:
    """Who closed the connection, and why, from the close frames each side sent."""
    sent_first = closed.sent is not None and not closed.rcvd_then_sent
    if sent_first and closed.sent is not None and closed.sent.code == CloseCode.MESSAGE_TOO_BIG:
        return BridgeOutcome(
            "daemon-message-too-big",
            f"the daemon sent a message larger than --max-message-bytes "
            f"({max_message_bytes} bytes)",
        )
    if closed.rcvd is not None:
        return BridgeOutcome("daemon-closed", f"the daemon closed the connection: {closed.rcvd}")
    return BridgeOutcome(
        "connection-lost", f"the connection to the daemon was lost, with no close frame ({closed})"
    )
