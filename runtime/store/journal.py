"""``StoreJournal``: the emitter's ``FrameJournal`` backed by a ``SessionStore``.

Every frame a session sends is numbered here, before it reaches any client
(``_meta.toolprep.seq``, one count per session, carried on from what the
store holds), and stored under that number: the store's frame log is the
one log of the session, and a client that saw frame ``n`` can ask for what
came after it.

Frames are buffered per session and handed to the writer when a card opens,
starts or ends, and when a turn ends (with the history the turn left). Some
of those hand-overs are waited for (``commit``): a card's terminal frame
and a tool's start are stored before any client sees them, and a turn's
frames and history are stored before its reply goes out. So a crash loses
at most the running turn's text since its last card, and never a card a
client saw finished or a call that may have run.

A number once shown is never given to another frame, even by a process
that opens the session after this one died with frames shown and not
stored: numbers are reserved in the store ahead of use, ``RESERVE_BLOCK``
at a time (a one-row write handed to the writer half a block before the
numbers run out, so a frame waits for it only when the writer is that far
behind; the first block is reserved as the session opens), and a process
that opens the session again numbers on after everything reserved, its
log marking the reserved numbers it lacks as a gap
(``FrameLog.resume_seq``). Closing a session (``end_session``,
``close``) settles the mark at the last number shown, so a session closed
cleanly leaves no gap.

The writes run on a thread of their own, one writer for SQLite's one-writer
rule, applying batches in the order they were handed over. When the writer
falls ``max_pending`` batches behind (a store stalled by another process's
lock, a slow disk), handing over waits for room: the sessions slow down,
memory stays bounded and nothing is dropped. A write the store refuses
(locked past its busy timeout, disk full, read-only) is counted against its
session, and the session's next turn end says so (``turn_ended`` returns the
notice the emitter sends); the frame numbers it lost stay unused, so a
replay shows a gap mark where they were, until the store takes writes again: the frames
it refused because it could not be written are kept (``owed_writes``, bounded) and written
then, under their own numbers, by the session's next write or as soon as the store's
recovery finds it writable, so the replay shows what the clients saw. A lost history is
repaired by the session's next turn end, which writes every entry the store lacks (the whole
history, if the lost one was a compacted one that had to be written whole).
A cause that keeps failing is logged once per interval with a count
(``failure_log``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, assert_never

from toolprep.messages.content import Content
from toolprep.messages.frames import agent_message_chunk, card_change, numbered
from toolprep.runtime.kernel.observer import NO_OBSERVER, TurnObserver
from toolprep.runtime.store.errors import SessionStoreReadOnly, StoreError
from toolprep.runtime.store.failure_log import FailureLog
from toolprep.runtime.store.owed_writes import MAX_OWED_BYTES, OwedWrites
from toolprep.runtime.store.session_store import SessionStore

logger = logging.getLogger(__name__)

__all__ = ["COMMIT_WAIT_S", "MAX_PENDING", "RESERVE_BLOCK", "THREAD_NAME", "StoreJournal"]

MAX_PENDING = 10_000
RESERVE_BLOCK = 256
"""Frame numbers reserved in the store at a time: one small write per this many frames. The
next block is asked for half a block before the numbers run out, so the mark runs at most
one and a half blocks past the last number shown: what a gap mark after a crash can count
("up to") beyond the frames it really lacks."""
THREAD_NAME = "toolprep-journal"

COMMIT_WAIT_S = 120.0
"""How long a commit waits for the writer before it counts its frames as not stored: far
past any busy timeout, since every write ends (stored or refused) within one."""


@dataclass(slots=True)
class _Frames:
    session_id: str
    frames: list[dict[str, Any]]
    error: str | None = None
    notice: bool = False
    """A turn end's notice of a loss: losing it too is not reported again."""


@dataclass(slots=True)
class _History:
    session_id: str
    history: tuple[Content, ...]
    rewritten: bool = False
    error: str | None = None


@dataclass(slots=True)
class _Reserve:
    """Reserve the session's numbers up to ``through`` (see ``reserve_seq``)."""

    session_id: str
    through: int
    error: str | None = None


@dataclass(slots=True)
class _Settle:
    """The session closed: ``last`` is the last number it showed (see ``settle_seq``)."""

    session_id: str
    last: int
    error: str | None = None


@dataclass(slots=True)
class _Retry:
    """The store can be written again: write what it refused (``owed_writes``)."""

    session_id: str = ""
    error: str | None = None


_Job = _Frames | _History | _Reserve | _Settle | _Retry


@dataclass(slots=True)
class _Loss:
    """What a session's writes lost since its last turn end said so."""

    frames: int = 0
    histories: int = 0
    causes: list[str] = field(default_factory=list)

    def add(self, job: _Job, cause: str) -> None:
        if isinstance(job, _Frames):
            self.frames += len(job.frames)
        else:
            self.histories += 1
        if cause not in self.causes:
            self.causes.append(cause)

    def notice(self) -> str:
        lost = []
        if self.frames:
            lost.append(f"{self.frames} update{'s' if self.frames != 1 else ''}")
        if self.histories:
            lost.append("the conversation history")
        return (
            f"the session could not be saved: {'; '.join(self.causes)} "
            f"({' and '.join(lost)} not stored)"
        )


class StoreJournal:
    """``record``, ``commit`` and ``turn_ended`` come from the emitter's thread only, so the
    per-session buffers need no lock; the numbers and the queue to the writer have one."""

    def __init__(
        self,
        store: SessionStore,
        *,
        max_pending: int = MAX_PENDING,
        commit_wait_s: float = COMMIT_WAIT_S,
        observer: TurnObserver = NO_OBSERVER,
        max_owed_bytes: int = MAX_OWED_BYTES,
    ) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be >= 1, got {max_pending}")
        self.store = store
        self.max_pending = max_pending
        self.commit_wait_s = commit_wait_s
        self._observer = observer  # hears each write's time and result
        self.lost_frames = 0
        self._pending: dict[str, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._written = threading.Condition(self._lock)
        self._queue: deque[_Job] = deque()
        self._handed = 0
        self._done = 0
        self._last_seq: dict[str, int] = {}
        # Each session's numbers reserved in the store (or tried and refused) so far, the
        # reservations handed to the writer so far, and the last of those (emitter's thread).
        self._reserved: dict[str, int] = {}
        self._asked: dict[str, int] = {}
        self._reserving: dict[str, tuple[int, _Reserve]] = {}
        # Each session's last batch handed over since its turn began (the emitter's thread).
        self._last_handed: dict[str, tuple[int, _Job]] = {}
        self._losses: dict[str, _Loss] = {}
        # Sessions whose compacted history was not saved: their next one is written whole.
        self._rewrite_owed: set[str] = set()
        self._closing = False
        self._failures = FailureLog(logger)
        # What the store refused while it could not be written (the writer's thread), and
        # whether a _Retry is queued (with the lock).
        self._owed = OwedWrites(max_owed_bytes)
        self._retry_queued = False
        store.recovery.when_writable(self._retry)
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()

    # --- numbering ------------------------------------------------------------------------

    def start_session(self, session_id: str, last_seq: int) -> None:
        """The session's log ends at ``last_seq`` (``FrameLog.resume_seq``): its next
        frame is the one after (or after the last this journal numbered, should those not
        all be stored). Its first block of numbers is reserved here, as it opens, so its
        first frames wait for no write."""
        with self._lock:
            last = self._last_seq[session_id] = max(self._last_seq.get(session_id, 0), last_seq)
        through = last + RESERVE_BLOCK
        try:
            self.store.frame_log.reserve_seq(session_id, through)
        except StoreError as exc:  # its first frame asks again, through the writer
            logger.error("frame numbers of %s up to %d not reserved: %s", session_id, through, exc)
            through = last
        with self._lock:
            self._reserved[session_id] = self._asked[session_id] = through

    def end_session(self, session_id: str) -> None:
        """The session closed here: settle its high-water mark at the last number it showed
        (handed to the writer after its frames); a later open numbers on from the store."""
        with self._lock:
            last = self._last_seq.pop(session_id, None)
            self._reserved.pop(session_id, None)
            self._asked.pop(session_id, None)
        self._reserving.pop(session_id, None)
        if last is not None:
            self._hand_over(_Settle(session_id, last))

    def _next_seq(self, session_id: str) -> int:
        with self._lock:
            last = self._last_seq.get(session_id)
        if last is None:  # not started here: carry on from the store's log
            try:
                last = self.store.frame_log.resume_seq(session_id)
            except StoreError as exc:
                logger.error("numbering the frames of %s from 1: %s", session_id, exc)
                last = 0
        with self._lock:
            last = max(last, self._last_seq.get(session_id, 0)) + 1
            self._last_seq[session_id] = last
            asked = self._asked.get(session_id, 0)
        if last + RESERVE_BLOCK // 2 > asked:
            reserve = _Reserve(session_id, max(asked, last - 1) + RESERVE_BLOCK)
            with self._lock:
                self._asked[session_id] = reserve.through
            self._reserving[session_id] = (self._hand_over(reserve), reserve)
        if last > self._reserved.get(session_id, 0):
            ticket, reserve = self._reserving[session_id]
            error = self._wait_for_written(ticket, reserve)
            if error is not None:
                # The session goes on (its frames are most likely refused too, and counted);
                # the next block tries again.
                logger.error(
                    "frame numbers of %s up to %d not reserved: %s",
                    session_id,
                    reserve.through,
                    error,
                )
            with self._lock:
                self._reserved[session_id] = max(self._reserved.get(session_id, 0), reserve.through)
        return last

    # --- the emitter's side -------------------------------------------------------------

    def record(self, session_id: str, update: dict[str, Any]) -> dict[str, Any]:
        """Number ``update`` and keep it; returns it numbered, as the clients get it."""
        framed = numbered(update, self._next_seq(session_id))
        self._pending.setdefault(session_id, []).append(framed)
        card = card_change(framed)
        # A card's opening and start are handed over at once too, so a process killed
        # mid-turn leaves it in the store as open (started or not), and the next one
        # gives it its discard.
        opens = update["sessionUpdate"] == "tool_call" or update.get("status") == "in_progress"
        if card is not None and (card[2] or opens):
            self._hand_over(_Frames(session_id, self._pending.pop(session_id)))
        return framed

    def commit(self, session_id: str) -> str | None:
        """Store the session's frames recorded so far, and wait until they are.

        Returns None once they are stored, else why they are not (they count
        against the session, and its turn end says so).
        """
        frames = self._take(session_id)
        if frames is not None:
            self._hand_over(frames)
        last = self._last_handed.get(session_id)
        return None if last is None else self._wait_for_written(*last)

    def turn_ended(
        self, session_id: str, history: tuple[Content, ...], *, rewritten: bool = False
    ) -> dict[str, Any] | None:
        """Store the turn's frames and ``history``, and wait until they are.

        Returns None if everything the session recorded since its last turn
        end is stored, else a notice for its clients naming what is not and
        why: an ``agent_message_chunk``, numbered and handed to the writer
        (not waited for), so once the store takes writes again a replay shows
        the frames before it that it lacks as a gap.
        """
        with self._lock:
            if session_id in self._rewrite_owed:
                self._rewrite_owed.discard(session_id)
                rewritten = True
        job = _History(session_id, history, rewritten)
        frames = self._take(session_id)
        if frames is not None:
            self._hand_over(frames)
        self._wait_for_written(self._hand_over(job), job)
        self._last_handed.pop(session_id, None)
        with self._lock:
            loss = self._losses.pop(session_id, None)
        if loss is None:
            return None
        notice = loss.notice()
        logger.error("session %s: %s", session_id, notice)
        framed = numbered(agent_message_chunk(f"\n[{notice}]\n"), self._next_seq(session_id))
        self._hand_over(_Frames(session_id, [framed], notice=True))
        return framed

    def _take(self, session_id: str) -> _Frames | None:
        frames = self._pending.pop(session_id, None)
        return _Frames(session_id, frames) if frames else None

    def _hand_over(self, job: _Job) -> int:
        """Queue ``job``, waiting while the writer is ``max_pending`` batches behind;
        returns the count of batches handed over once it is among them."""
        with self._lock:
            self._written.wait_for(
                lambda: self._closing or self._handed - self._done < self.max_pending
            )
            closed = self._closing
            if not closed:
                self._queue.append(job)
                self._handed += 1
                self._work.notify()
            else:
                job.error = "the journal is closed"
                self._count_loss(job, job.error)
            ticket = self._handed
        if closed:
            logger.error("%s not saved: the journal is closed", _describe(job))
        self._last_handed[job.session_id] = (ticket, job)
        return ticket

    def _wait_for_written(self, ticket: int, job: _Job) -> str | None:
        with self._lock:
            if not self._written.wait_for(lambda: self._done >= ticket, self.commit_wait_s):
                cause = f"the session store took no write for {self.commit_wait_s:.0f} s"
                if job.error is None:
                    job.error = cause
                    self._count_loss(job, cause)
            return job.error

    # --- waiting for the writer ---------------------------------------------------------

    @property
    def behind(self) -> int:
        """Batches handed over and not written (or refused) yet; at most ``max_pending``."""
        with self._lock:
            return self._handed - self._done

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything handed over so far is written (or failed and counted).

        True if it was within ``timeout``. Frames of a running turn that wait
        for their card's end or the turn's end are not handed over yet.
        """
        with self._lock:
            target = self._handed
            return self._written.wait_for(lambda: self._done >= target, timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Write everything handed over, then stop the writer; later batches are refused.

        True if the writer finished within ``timeout``; if not, it goes on
        writing (the store, when closed under it, fails those writes).
        """
        self._retry()  # what the store refused, once more: it may take writes again
        with self._lock:
            open_sessions = list(self._last_seq)
        for session_id in open_sessions:
            self.end_session(session_id)
        with self._lock:
            self._closing = True
            self._work.notify()
            self._written.notify_all()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _retry(self) -> None:
        """Have the writer write what the store refused (from any thread: the store's
        recovery calls this once it can be written again)."""
        with self._lock:
            if self._closing or self._retry_queued:
                return
            self._retry_queued = True
            self._queue.append(_Retry())
            self._handed += 1
            self._work.notify()

    # --- the writer's thread ------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                self._work.wait_for(lambda: bool(self._queue) or self._closing)
                if not self._queue:
                    self._failures.flush()
                    self._owed.lose()
                    return
                jobs = list(self._queue)
                self._queue.clear()
            for write, carried in _coalesce(jobs):
                started = time.monotonic()
                error = self._apply(self._with_owed(write))
                if error is None:
                    self._paid(write)
                else:
                    self._keep(write)
                self._observer.store_written(time.monotonic() - started, error is None)
                with self._lock:
                    if error is not None:
                        for job in carried:
                            if job.error is None:
                                job.error = error
                                self._count_loss(job, error)
                    self._done += len(carried)
                    self._written.notify_all()

    def _with_owed(self, job: _Job) -> _Job:
        """``job`` with what the store still owes its session first: a session's frames are
        written in order, so an earlier card's end lands before a later write. A settled
        mark waits for the frames it covers."""
        match job:
            case _Frames():
                owed = self._owed.pending(job.session_id)
                if owed:
                    return _Frames(job.session_id, owed + job.frames, notice=job.notice)
            case _Settle():
                if job.session_id in self._owed.sessions():
                    self._owed.owe_settle(job.session_id, job.last)
                    return _Retry()
            case _History() | _Reserve() | _Retry():
                pass
            case _:
                assert_never(job)
        return job

    def _paid(self, job: _Job) -> None:
        """``job`` is stored, with what its session owed before it."""
        if isinstance(job, _Frames):
            self._owed.written(job.session_id)

    def _keep(self, job: _Job) -> None:
        """A write refused because the store cannot be written is kept to be written once
        it can be; one refused for any other reason (the session deleted) is not, nor is
        what its session owed, which it carried (kept, it would fail every later write)."""
        if self.store.database.read_only_cause is None:
            if isinstance(job, _Frames):
                self._owed.discard(job.session_id)
            return
        match job:
            case _Frames():
                self._owed.owe_frames(job.session_id, job.frames)
            case _Settle():
                self._owed.owe_settle(job.session_id, job.last)
            case _History() | _Reserve() | _Retry():
                pass
            case _:
                assert_never(job)

    def _pay_owed(self) -> None:
        """Write what the store refused, if it can be written now (``SessionStoreReadOnly``
        if it cannot: it stays owed)."""
        with self._lock:
            self._retry_queued = False
        self._owed.pay(self.store)

    def _count_loss(self, job: _Job, cause: str) -> None:
        """With the lock held: the session's next turn end reports it; a lost compacted
        history makes the next one be saved whole. A refused reservation or settling is no
        loss of anything shown: a later replay counts the numbers past the last stored frame
        as "up to"."""
        if isinstance(job, _Reserve | _Settle | _Retry):
            return
        if isinstance(job, _Frames):
            self.lost_frames += len(job.frames)
            if job.notice:
                return
        elif job.rewritten:
            self._rewrite_owed.add(job.session_id)
        self._losses.setdefault(job.session_id, _Loss()).add(job, cause)

    def _apply(self, job: _Job) -> str | None:
        """Write ``job``; None if it is stored, else why not (logged here)."""
        try:
            match job:
                case _Frames():
                    self.store.frame_log.append_frames(job.session_id, job.frames)
                case _History():
                    self.store.sessions.save_history(
                        job.session_id, job.history, rewritten=job.rewritten
                    )
                case _Reserve():
                    self.store.frame_log.reserve_seq(job.session_id, job.through)
                case _Settle():
                    self.store.frame_log.settle_seq(job.session_id, job.last)
                case _Retry():
                    self._pay_owed()
                case _:
                    assert_never(job)
        except SessionStoreReadOnly as exc:  # a retry that found it still read-only
            return exc.cause
        except StoreError as exc:
            kind = _kind(job)
            self._failures.failed(kind, exc.cause, f"{_describe(job)} not saved: {exc}")
            return _cause(exc)
        except Exception:  # the writer serves every session: one bad write must not stop it
            logger.exception("%s not saved", _describe(job))
            return _FAILED
        return None


_FAILED = "the session store failed (the agent's log says how)"


def _cause(exc: StoreError) -> str:
    """Why, as the session's clients are told: the store's words for why it cannot be
    written (never SQLite's text: the log line has that), or the failure's own words
    without the file and the step the log line names already."""
    text = str(exc)
    if exc.cause != text:
        return exc.cause
    return text.rpartition(": ")[2] or text


def _coalesce(jobs: list[_Job]) -> list[tuple[_Job, list[_Job]]]:
    """Consecutive frame batches of one session become one write (one transaction, same
    order); each write comes with the batches it carries."""
    merged: list[tuple[_Job, list[_Job]]] = []
    for job in jobs:
        if merged:
            last, carried = merged[-1]
            if (
                isinstance(job, _Frames)
                and isinstance(last, _Frames)
                and last.session_id == job.session_id
            ):
                frames = _Frames(job.session_id, last.frames + job.frames)
                merged[-1] = (frames, [*carried, job])
                continue
        merged.append((job, [job]))
    return merged


def _kind(job: _Job) -> str:
    match job:
        case _Frames():
            return "frame"
        case _History():
            return "history"
        case _Reserve() | _Settle():
            return "reservation"
        case _Retry():
            return "frame"
        case _:
            assert_never(job)


def _describe(job: _Job) -> str:
    match job:
        case _Frames():
            return f"{len(job.frames)} frames of {job.session_id} were"
        case _History():
            return f"the history of {job.session_id} was"
        case _Reserve():
            return f"the frame numbers of {job.session_id} up to {job.through} were"
        case _Settle():
            return f"the last frame number of {job.session_id} ({job.last}) was"
        case _Retry():
            return "the frames the store refused were"
        case _:
            assert_never(job)
