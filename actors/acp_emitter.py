"""AcpEmitter: the only writer of frames to each client connection.

Every update of a session passes through this one actor, so the order in which
roles *sent* frames (causally: tracker before executor before supervisor) is
the order the client reads them, and the turn result is written only after
every frame that was sent before it. With a journal, each frame is numbered
and kept before it is sent; a card's end and a tool's start are stored
before any client sees them, and a turn's frames and history before its
result. A failing write is logged and counted,
never raised: during cleanup, one broken write must not stop the other
discards.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from toolprep.actors.base import EMITTER, Handlers, RoleActor
from toolprep.actors.directory import RoleDirectory
from toolprep.messages.frames import card_change
from toolprep.messages.sinks import FrameJournal, SessionSink
from toolprep.messages.turns import (
    AskPermission,
    AttachSink,
    DeliverTurnResult,
    DetachSink,
    TurnResult,
    WriteFrames,
)
from toolprep.runtime.tools.filters import card_suppressed

logger = logging.getLogger(__name__)

UpdatesWriter: TypeAlias = Callable[[Sequence[tuple[str, dict[str, Any]]]], None]
"""A sink's ``send_updates``: the sessions whose sinks share one are written together."""


@dataclass(slots=True)
class EmitterState:
    sinks: dict[str, SessionSink] = field(default_factory=dict)
    write_failures: int = 0
    """Writes (one ``send_updates`` call each, of one or more frames) that raised."""
    frames_written: int = 0
    journal: FrameJournal | None = None


class AcpEmitter(RoleActor):
    role = EMITTER

    def __init__(self, directory: RoleDirectory, state: EmitterState) -> None:
        super().__init__(directory)
        self.state = state

    def handlers(self) -> Handlers:
        return {
            WriteFrames: self.on_frames,
            DeliverTurnResult: self.on_turn_result,
            AskPermission: self.on_ask_permission,
            AttachSink: self.on_attach,
            DetachSink: self.on_detach,
        }

    def on_attach(self, msg: AttachSink) -> None:
        self.state.sinks[msg.session_id] = msg.sink

    def on_detach(self, msg: DetachSink) -> None:
        """Forget the session's sink, then say the close is done (a reopen waits for it)."""
        self.state.sinks.pop(msg.session_id, None)
        _resolve(msg.closed, None)

    def _write(self, send_updates: UpdatesWriter, frames: list[tuple[str, dict[str, Any]]]) -> None:
        try:
            send_updates(frames)
            self.state.frames_written += len(frames)
        except Exception as exc:  # a broken client must not take the runtime down
            self.state.write_failures += 1
            logger.warning("writing %d frames failed: %r", len(frames), exc)

    def on_frames(self, msg: WriteFrames) -> None:
        """Number and keep each write's frames, store them first if they must be (a card's
        end, a tool's start), then send them: the frames of sessions whose sinks share a
        ``send_updates`` in one call, in order. Whoever waits for a write to be stored
        hears only once every frame of the batch is sent."""
        state = self.state
        journal = state.journal
        batches: dict[UpdatesWriter, list[tuple[str, dict[str, Any]]]] = {}
        stored: list[tuple[Future[str | None], str | None]] = []
        for write in msg.writes:
            session_id = write.session_id
            sink = state.sinks.get(session_id)
            updates = [u for u in write.updates if not _suppressed(u)]
            unstored: str | None = None
            if sink is not None and updates:
                if journal is not None:
                    updates = [journal.record(session_id, update) for update in updates]
                    if write.stored is not None or any(_ends_card(u) for u in updates):
                        unstored = journal.commit(session_id)
                batch = batches.setdefault(sink.send_updates, [])
                batch.extend((session_id, update) for update in updates)
            if write.stored is not None:
                stored.append((write.stored, unstored))
        for send_updates, frames in batches.items():
            self._write(send_updates, frames)
        observer = self.directory.observer
        credit = self.directory.read_credit
        for write in msg.writes:
            if write.updates:
                observer.frames_written(write.session_id, write.updates)
            if write.read:
                credit.give_back(write.session_id, write.read)
        for future, unstored in stored:
            _resolve(future, unstored)

    def on_turn_result(self, msg: DeliverTurnResult) -> None:
        """The turn's frames and history are stored before its result goes out; if they could
        not all be, the session's clients are told so first."""
        journal = self.state.journal
        sink = self.state.sinks.get(msg.session_id)
        if journal is not None and sink is not None:
            notice = journal.turn_ended(msg.session_id, msg.history, rewritten=msg.rewritten)
            if notice is not None:
                self._write(sink.send_updates, [(msg.session_id, notice)])
        result = msg.result
        end = result.stop_reason if result.stop_reason is not None else "error"
        self.directory.observer.turn_ended(msg.session_id, end)
        _resolve(msg.reply, result)

    def on_ask_permission(self, msg: AskPermission) -> None:
        sink = self.state.sinks.get(msg.session_id)
        if sink is None:
            _resolve(msg.reply, "cancelled")
            return
        observer = self.directory.observer
        call_id = str(msg.tool_call.get("toolCallId", ""))
        observer.permission_asked(msg.session_id, call_id)
        try:
            answer = sink.request_permission(msg.session_id, msg.tool_call, msg.request)
        except Exception as exc:
            logger.warning("permission request for %s failed: %r", msg.session_id, exc)
            _resolve(msg.reply, "cancelled")
            return

        def relay(done: Future[str]) -> None:
            try:
                outcome = done.result()
            except Exception:
                outcome = "cancelled"
            observer.permission_answered(msg.session_id, call_id, outcome)
            _resolve(msg.reply, outcome)

        answer.add_done_callback(relay)


def _suppressed(update: dict[str, Any]) -> bool:
    meta = update.get("_meta")
    return (
        meta is not None
        and update["sessionUpdate"] in ("tool_call", "tool_call_update")
        and card_suppressed(meta.get("toolName", ""))
    )


def _ends_card(update: dict[str, Any]) -> bool:
    card = card_change(update)
    return card is not None and card[2]


def _resolve(future: Future[Any], value: Any) -> None:
    """Complete a reply future once; its callbacks (the response write) run here, in order."""
    if future.done():
        return
    try:
        future.set_result(value)
    except Exception as exc:  # InvalidStateError from a race, or a failing callback
        logger.warning("could not deliver %r: %r", value, exc)


__all__ = ["AcpEmitter", "EmitterState", "SessionSink", "TurnResult"]
