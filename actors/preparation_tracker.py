"""PreparationTracker: the cards an attempt has shown, until execution or discard.

Per session it follows the current attempt's tool calls through three states:
*pending* (card shown, arguments still streaming), *parsed* (complete call
arrived) and gone (released to execution, or discarded). It is the only role
that sees chunks, so it is also where a provider-reused id is renamed before
any frame carries it: the preparing frame and every later frame for that call
use the same normalised id.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from toolprep.actors.base import EMITTER, SUPERVISOR, TRACKER, Handlers, RoleActor
from toolprep.actors.directory import RoleDirectory
from toolprep.messages import frames
from toolprep.messages.content import (
    Content,
    FinishReason,
    FunctionCall,
    FunctionCallPart,
    GenerateContentResponse,
    Part,
    TextPart,
    ThoughtPart,
    Usage,
)
from toolprep.messages.frames import DiscardReason
from toolprep.messages.preparation import get_preparations
from toolprep.messages.turns import (
    AttemptChunks,
    AttemptEnded,
    AttemptSucceeded,
    BeginAttempt,
    CallsReleased,
    ChunksReceived,
    EndAttempt,
    RememberShownCalls,
    SessionClosed,
    SessionFrames,
    StreamCompleted,
    StreamFailed,
    ToolCallRequest,
    WriteFrames,
)
from toolprep.runtime.tools.filters import card_suppressed

logger = logging.getLogger(__name__)

ToolKindLookup = Callable[[str], str]


@dataclass(slots=True)
class Entry:
    call_id: str
    tool_name: str
    card_shown: bool
    call: FunctionCall | None = None


@dataclass(slots=True)
class AttemptTrack:
    attempt: int
    entries: dict[str, Entry] = field(default_factory=dict)  # keyed by the provider's raw id
    order: list[str] = field(default_factory=list)
    parts: list[Part] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    usage: Usage | None = None
    stream_closed: bool = False
    anonymous: int = 0


@dataclass(slots=True)
class SessionTrack:
    shown_ids: set[str] = field(default_factory=set)
    current: AttemptTrack | None = None


@dataclass(slots=True)
class TrackerState:
    sessions: dict[str, SessionTrack] = field(default_factory=dict)


class PreparationTracker(RoleActor):
    role = TRACKER

    def __init__(
        self, directory: RoleDirectory, state: TrackerState, kind_of: ToolKindLookup
    ) -> None:
        super().__init__(directory)
        self.state = state
        self.kind_of = kind_of

    def handlers(self) -> Handlers:
        return {
            BeginAttempt: self.on_begin,
            ChunksReceived: self.on_chunks,
            StreamCompleted: self.on_completed,
            StreamFailed: self.on_failed,
            EndAttempt: self.on_end,
            CallsReleased: self.on_released,
            RememberShownCalls: self.on_remember_shown,
            SessionClosed: self.on_session_closed,
        }

    # --- helpers ---------------------------------------------------------------

    def _live(self, session_id: str, attempt: int) -> tuple[SessionTrack, AttemptTrack] | None:
        track = self.state.sessions.get(session_id)
        if track is None or track.current is None or track.current.attempt != attempt:
            return None
        return track, track.current

    @staticmethod
    def _fresh_id(track: SessionTrack, raw_id: str) -> str:
        if raw_id not in track.shown_ids:
            return raw_id
        n = 2
        while f"{raw_id}_{n}" in track.shown_ids:
            n += 1
        return f"{raw_id}_{n}"

    def _send(self, session_id: str, updates: list[dict[str, Any]]) -> None:
        if updates:
            self.directory.tell(EMITTER, WriteFrames.of(session_id, tuple(updates)))

    # --- handlers --------------------------------------------------------------

    def on_begin(self, msg: BeginAttempt) -> None:
        track = self.state.sessions.setdefault(msg.session_id, SessionTrack())
        if track.current is not None:
            logger.error("attempt %s of %s began over a live attempt", msg.attempt, msg.session_id)
        track.current = AttemptTrack(msg.attempt)

    def on_chunks(self, msg: ChunksReceived) -> None:
        """Each attempt's chunks in the order read, the frames of all in one hop: reading
        chunks sends nothing else, so no other role's frame can need to come between."""
        # Every batch gets a write, frames or not: the emitter gives its read credit back.
        writes = tuple(self._frames_for(batch) for batch in msg.batches)
        if writes:
            self.directory.tell(EMITTER, WriteFrames(writes))

    def _frames_for(self, batch: AttemptChunks) -> SessionFrames:
        live = self._live(batch.session_id, batch.attempt)
        if live is None or live[1].stream_closed:
            return SessionFrames(batch.session_id, (), read=batch.weight)
        track, attempt = live
        updates: list[dict[str, Any]] = []
        named = len(attempt.order)
        for chunk in batch.chunks:
            self._read_chunk(track, attempt, chunk, updates)
        if len(attempt.order) > named:  # cards opened: their wait started when the batch came
            observer = self.directory.observer
            for raw_id in attempt.order[named:]:
                entry = attempt.entries[raw_id]
                if entry.card_shown:
                    observer.tool_named(
                        batch.session_id, entry.call_id, entry.tool_name, batch.received_at
                    )
        return SessionFrames(batch.session_id, tuple(updates), read=batch.weight)

    def _read_chunk(
        self,
        track: SessionTrack,
        attempt: AttemptTrack,
        chunk: GenerateContentResponse,
        updates: list[dict[str, Any]],
    ) -> None:
        # Preparations first: a chunk may carry both a preparation and its call.
        for prep in get_preparations(chunk):
            if prep.call_id in attempt.entries:
                continue
            suppressed = card_suppressed(prep.tool_name)
            call_id = self._fresh_id(track, prep.call_id)
            attempt.entries[prep.call_id] = Entry(
                call_id, prep.tool_name, card_shown=not suppressed
            )
            attempt.order.append(prep.call_id)
            track.shown_ids.add(call_id)
            if not suppressed:
                updates.append(
                    frames.preparing(call_id, prep.tool_name, self.kind_of(prep.tool_name))
                )
        for part in chunk.parts:
            if isinstance(part, TextPart):
                if part.text:
                    updates.append(frames.agent_message_chunk(part.text))
                    attempt.parts.append(part)
            elif isinstance(part, ThoughtPart):
                if part.text:
                    updates.append(frames.agent_thought_chunk(part.text))
                attempt.parts.append(part)
            elif isinstance(part, FunctionCallPart):
                self._collect_call(track, attempt, part.function_call)
        if chunk.finish_reason is not None:
            attempt.finish_reason = chunk.finish_reason
        if chunk.usage is not None:
            attempt.usage = chunk.usage

    def _collect_call(self, track: SessionTrack, attempt: AttemptTrack, call: FunctionCall) -> None:
        provider_id = call.id
        if not provider_id:
            attempt.anonymous += 1
            provider_id = f"call_{attempt.attempt}_{attempt.anonymous}"
        raw_id = provider_id
        entry = attempt.entries.get(raw_id)
        if entry is not None and entry.call is not None:
            # Same id for a second call in one response: give it its own identity.
            raw_id = f"{provider_id}#{len(attempt.order)}"
            entry = None
        if entry is None:
            call_id = self._fresh_id(track, provider_id)
            entry = Entry(call_id, call.name, card_shown=False)
            attempt.entries[raw_id] = entry
            attempt.order.append(raw_id)
            track.shown_ids.add(call_id)
        entry.call = FunctionCall(entry.call_id, call.name, dict(call.args))
        entry.tool_name = call.name

    def on_completed(self, msg: StreamCompleted) -> None:
        live = self._live(msg.session_id, msg.attempt)
        if live is None or live[1].stream_closed:
            return
        _, attempt = live
        attempt.stream_closed = True
        updates: list[dict[str, Any]] = []
        calls: list[ToolCallRequest] = []
        for raw_id in list(attempt.order):
            entry = attempt.entries[raw_id]
            if entry.call is None:
                # Rule: a preparation whose complete call never came is discarded.
                if entry.card_shown:
                    cut = attempt.finish_reason is FinishReason.MAX_TOKENS
                    reason: DiscardReason = "max_tokens" if cut else "stream_error"
                    updates.append(frames.discarded(entry.call_id, entry.tool_name, reason))
                del attempt.entries[raw_id]
                attempt.order.remove(raw_id)
            elif not entry.call.name:
                # Rule: a call without a tool name is never run nor kept in the history;
                # its card says why.
                updates.append(frames.unnamed_call_discarded(entry.call_id))
                del attempt.entries[raw_id]
                attempt.order.remove(raw_id)
            else:
                calls.append(ToolCallRequest(entry.call_id, entry.call, prepared=entry.card_shown))
        self._send(msg.session_id, updates)
        parts = _merge_text(attempt.parts) + [FunctionCallPart(c.call) for c in calls]
        self.directory.tell(
            SUPERVISOR,
            AttemptSucceeded(
                msg.session_id,
                msg.attempt,
                Content("model", tuple(parts)),
                attempt.finish_reason,
                attempt.usage,
                tuple(calls),
            ),
        )

    def on_failed(self, msg: StreamFailed) -> None:
        live = self._live(msg.session_id, msg.attempt)
        if live is None or live[1].stream_closed:
            return
        live[1].stream_closed = True
        self.directory.tell(SUPERVISOR, msg)

    def on_end(self, msg: EndAttempt) -> None:
        discarded: list[str] = []
        live = self._live(msg.session_id, msg.attempt)
        if live is not None:
            track, attempt = live
            attempt.stream_closed = True
            updates: list[dict[str, Any]] = []
            for raw_id in attempt.order:
                entry = attempt.entries[raw_id]
                if entry.card_shown:
                    updates.append(
                        frames.discarded(
                            entry.call_id, entry.tool_name, msg.reason, next_model=msg.next_model
                        )
                    )
                    discarded.append(entry.call_id)
            track.current = None
            self._send(msg.session_id, updates)
        self.directory.tell(
            SUPERVISOR, AttemptEnded(msg.session_id, msg.attempt, msg.reason, tuple(discarded))
        )

    def on_released(self, msg: CallsReleased) -> None:
        live = self._live(msg.session_id, msg.attempt)
        if live is not None:
            live[0].current = None

    def on_remember_shown(self, msg: RememberShownCalls) -> None:
        track = self.state.sessions.setdefault(msg.session_id, SessionTrack())
        track.shown_ids.update(msg.call_ids)

    def on_session_closed(self, msg: SessionClosed) -> None:
        self.state.sessions.pop(msg.session_id, None)


def _merge_text(parts: list[Part]) -> list[Part]:
    """Join consecutive text (and consecutive thought) fragments for history.

    A run's fragments are collected and joined once at the end (``str.join``), so a
    reply of n fragments costs O(n): adding them one by one would copy the text so far
    each time, quadratic in a long reply, on the role every session shares. A signed
    thought ends its run (the signature is the last fragment's).
    """
    merged: list[Part] = []
    pieces: list[list[str]] = []  # beside each merged part, its text's fragments
    for part in parts:
        last = merged[-1] if merged else None
        if isinstance(part, TextPart) and isinstance(last, TextPart):
            pieces[-1].append(part.text)
        elif (
            isinstance(part, ThoughtPart)
            and isinstance(last, ThoughtPart)
            and last.signature is None
        ):
            pieces[-1].append(part.text)
            merged[-1] = ThoughtPart(last.text, part.signature)
        else:
            merged.append(part)
            pieces.append([part.text] if isinstance(part, TextPart | ThoughtPart) else [])
    for index, fragments in enumerate(pieces):
        if len(fragments) > 1:
            joined = merged[index]
            assert isinstance(joined, TextPart | ThoughtPart)
            merged[index] = replace(joined, text="".join(fragments))
    return merged
