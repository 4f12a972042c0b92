"""``toolprep connect``'s pump: an editor's stdio and a daemon's WebSocket, message for message.

Each stdin line becomes one WebSocket text frame and each frame one stdout
line, byte for byte: the bridge only splits lines (``LineTransport``, which
also bounds the memory an endless line can cost), so what the editor and
the daemon say to each other is never parsed, re-encoded or reordered here.

Two threads pump, one per direction; the first end either of them meets
(or a stop signal, seen by the main thread) decides how the connection is
closed and what the process reports: the end of stdin closes the WebSocket
normally, a close from the daemon is reported with its code and reason.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Final, Literal, assert_never

from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode
from websockets.sync.client import ClientConnection

from toolprep.runtime.acp.line_transport import LineTransport
from toolprep.runtime.acp.transport import SkippedMessage

__all__ = ["BridgeEnd", "BridgeOutcome", "run_bridge"]

logger = logging.getLogger(__name__)

BridgeEnd = Literal[
    "editor-closed",  # stdin ended, or stdout is gone: the editor left
    "stopped",  # SIGTERM or SIGINT
    "editor-message-too-big",
    "daemon-message-too-big",
    "daemon-closed",  # the daemon sent a close frame
    "connection-lost",  # the connection broke with no close frame from the daemon
]

_STOP_POLL_S: Final = 0.1
_READER_JOIN_S: Final = 30.0


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
            case (
                "editor-message-too-big"
                | "daemon-message-too-big"
                | "daemon-closed"
                | "connection-lost"
            ):
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


def run_bridge(
    socket: ClientConnection,
    stdin: IO[bytes],
    stdout: IO[bytes],
    max_message_bytes: int,
    stop_requested: Callable[[], bool],
) -> BridgeOutcome:
    """Pump both ways until one side ends; close the WebSocket accordingly; say how it ended.

    ``stdin`` should be unbuffered: its reader thread may still be blocked
    reading when the process exits.
    """
    lines = LineTransport(stdin, stdout, max_message_bytes)
    ending = _Ending()
    to_daemon = threading.Thread(
        target=_editor_to_daemon, args=(lines, socket, ending), name="connect-stdin", daemon=True
    )
    to_editor = threading.Thread(
        target=_daemon_to_editor, args=(socket, lines, ending), name="connect-stdout", daemon=True
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
        case "editor-closed":
            socket.close(CloseCode.NORMAL_CLOSURE)
        case "stopped":
            socket.close(CloseCode.GOING_AWAY, "the bridge was stopped")
        case "editor-message-too-big":
            socket.close(CloseCode.MESSAGE_TOO_BIG, "a message from the editor was too big")
        case "daemon-message-too-big" | "daemon-closed" | "connection-lost":
            socket.close()
        case _:
            assert_never(outcome.end)


def _editor_to_daemon(lines: LineTransport, socket: ClientConnection, ending: _Ending) -> None:
    for line in lines.incoming():
        if isinstance(line, SkippedMessage):
            size = f" of {line.size} bytes" if line.size is not None else ""
            ending.report(
                BridgeOutcome(
                    "editor-message-too-big",
                    f"the editor sent a message{size} larger than --max-message-bytes "
                    f"({lines.max_message_bytes} bytes)",
                )
            )
            return
        if not line.strip():
            continue  # a blank line carries no message
        try:
            socket.send(line, text=True)
        except ConnectionClosed:
            return  # the other thread reports how the connection ended
    ending.report(BridgeOutcome("editor-closed"))


def _daemon_to_editor(socket: ClientConnection, lines: LineTransport, ending: _Ending) -> None:
    while True:
        try:
            frame = socket.recv(decode=False)
        except ConnectionClosed as closed:
            ending.report(_closed_outcome(closed, lines.max_message_bytes))
            return
        try:
            lines.write(bytes(frame) + b"\n")
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
