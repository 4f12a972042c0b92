"""``StoreJournal``: the emitter's ``FrameJournal`` backed by a ``SessionStore``.

Frames are buffered per session and handed to the store when a card opens,
when it reaches its terminal update and when a turn ends (with the history
the turn left), so a crash loses at most the running turn's frames since
then, plus the little that was handed over and not written yet; and every
card it had open is in the store, where the next process discards it.

The writes run on a thread of their own. The emitter serves every session
of the runtime, so a database locked by another process (for up to the
store's busy timeout) or a slow disk must not hold back the frames of them
all. One writer keeps SQLite's one-writer rule, and since it applies the
batches in the order they were handed over, a session's frames are appended
in the order they were sent and a turn's history is saved after its frames.
``flush`` waits for what was handed over, so whoever reads the store (a
session being loaded) sees it; ``close`` writes it all before the store goes.

A store that fails (disk full, locked, corrupt) costs the record, not the
session: the error is logged with what was lost and the writer goes on; a
cause that keeps failing is logged once per interval with a count
(``failure_log``).
Should the writer fall ``max_pending`` batches behind (a store stalled for
long), further batches are dropped and counted instead of queued, so memory
stays bounded and the emitter never waits for the disk; the loss is logged
when it starts and counted after each write. A dropped history is repaired
by the session's next turn end, which writes every entry the store lacks
(the whole history, if the lost one was a compacted one that had to be
written whole); dropped frames are missing from the session's replay.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from toolprep.messages.content import Content
from toolprep.messages.frames import card_change
from toolprep.runtime.store.failure_log import FailureLog
from toolprep.runtime.store.session_store import SessionStore, StoreError

logger = logging.getLogger(__name__)

__all__ = ["MAX_PENDING", "THREAD_NAME", "StoreJournal"]

MAX_PENDING = 10_000
THREAD_NAME = "toolprep-journal"


@dataclass(frozen=True, slots=True)
class _Frames:
    session_id: str
    frames: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class _History:
    session_id: str
    history: tuple[Content, ...]
    rewritten: bool = False


_Job = _Frames | _History


@dataclass(slots=True)
class _Dropped:
    """Batches refused since the writer last reported them: a long stall logs one line per
    round of writes, not one per refused batch."""

    frames: int = 0
    histories: int = 0
    sessions: set[str] = field(default_factory=set)

    def add(self, job: _Job) -> None:
        if isinstance(job, _Frames):
            self.frames += len(job.frames)
        else:
            self.histories += 1
        self.sessions.add(job.session_id)


class StoreJournal:
    """``record`` and ``turn_ended`` come from the emitter's thread only, so the
    per-session buffers need no lock; the queue to the writer has one."""

    def __init__(self, store: SessionStore, *, max_pending: int = MAX_PENDING) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be >= 1, got {max_pending}")
        self.store = store
        self.max_pending = max_pending
        self.dropped_frames = 0
        self._pending: dict[str, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._written = threading.Condition(self._lock)
        self._queue: deque[_Job] = deque()
        self._handed = 0
        self._done = 0
        self._dropped = _Dropped()
        self._dropping = False
        # Sessions whose compacted history was not saved: their next one is written whole.
        self._rewrite_owed: set[str] = set()
        self._closing = False
        self._failures = FailureLog(logger)
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()

    # --- the emitter's side -------------------------------------------------------------

    def record(self, session_id: str, update: dict[str, Any]) -> None:
        self._pending.setdefault(session_id, []).append(update)
        card = card_change(update)
        # A card's first frame is written at once too, so a process killed mid-turn
        # leaves it in the store as open, and the next one gives it its discard.
        if card is not None and (card[2] or update["sessionUpdate"] == "tool_call"):
            self._hand_over(self._take(session_id))

    def turn_ended(
        self, session_id: str, history: tuple[Content, ...], *, rewritten: bool = False
    ) -> None:
        with self._lock:
            if session_id in self._rewrite_owed:
                self._rewrite_owed.discard(session_id)
                rewritten = True
        self._hand_over(self._take(session_id), _History(session_id, history, rewritten))

    def _take(self, session_id: str) -> _Frames | None:
        frames = self._pending.pop(session_id, None)
        return _Frames(session_id, frames) if frames else None

    def _hand_over(self, *jobs: _Job | None) -> None:
        refused: list[_Job] = []
        with self._lock:
            closing = self._closing
            for job in jobs:
                if job is None:
                    continue
                if closing or self._handed - self._done >= self.max_pending:
                    refused.append(job)
                else:
                    self._queue.append(job)
                    self._handed += 1
            self._work.notify()
            starts_dropping = bool(refused) and not closing and not self._dropping
            if refused and not closing:
                self._dropping = True
                for job in refused:
                    self._dropped.add(job)
                    self._owe_rewrite(job)
                    if isinstance(job, _Frames):
                        self.dropped_frames += len(job.frames)
        if closing:
            for job in refused:
                logger.error("%s not saved: the journal is closed", _describe(job))
        elif starts_dropping:
            logger.error(
                "the session store is %d batches behind: new frames are dropped until it "
                "catches up",
                self.max_pending,
            )

    # --- waiting for the writer ---------------------------------------------------------

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything handed over so far is written (or failed and logged).

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
        with self._lock:
            self._closing = True
            self._work.notify()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # --- the writer's thread ------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                self._work.wait_for(lambda: bool(self._queue) or self._closing)
                if not self._queue:
                    self._failures.flush()
                    return
                jobs = list(self._queue)
                self._queue.clear()
            writes = _coalesce(jobs)
            for n, (job, count) in enumerate(writes, 1):
                self._apply(job)
                if n == len(writes):  # before the last is counted, so a flush sees it logged
                    self._report_dropped()
                with self._lock:
                    self._done += count
                    self._written.notify_all()

    def _report_dropped(self) -> None:
        with self._lock:
            dropped, self._dropped = self._dropped, _Dropped()
            self._dropping = self._dropping and bool(self._queue)
        if dropped.sessions:
            logger.error(
                "%d frames and %d histories of %d sessions (%s) were not saved: "
                "the session store fell behind",
                dropped.frames,
                dropped.histories,
                len(dropped.sessions),
                ", ".join(sorted(dropped.sessions)[:5]),
            )

    def _owe_rewrite(self, job: _Job) -> None:
        """Remember a lost compacted history (with the lock held): the next is saved whole."""
        if isinstance(job, _History) and job.rewritten:
            self._rewrite_owed.add(job.session_id)

    def _apply(self, job: _Job) -> None:
        try:
            if isinstance(job, _Frames):
                self.store.append_frames(job.session_id, job.frames)
            else:
                self.store.save_history(job.session_id, job.history, rewritten=job.rewritten)
        except StoreError as exc:
            kind = "frame" if isinstance(job, _Frames) else "history"
            self._failures.failed(kind, exc.cause, f"{_describe(job)} not saved: {exc}")
            with self._lock:
                self._owe_rewrite(job)
        except Exception:  # the writer serves every session: one bad write must not stop it
            logger.exception("%s not saved", _describe(job))
            with self._lock:
                self._owe_rewrite(job)


def _coalesce(jobs: list[_Job]) -> list[tuple[_Job, int]]:
    """Consecutive frame batches of one session become one write (one transaction, same
    order); each write comes with how many batches it carries."""
    merged: list[tuple[_Job, int]] = []
    for job in jobs:
        if merged:
            last, count = merged[-1]
            if (
                isinstance(job, _Frames)
                and isinstance(last, _Frames)
                and last.session_id == job.session_id
            ):
                merged[-1] = (_Frames(job.session_id, last.frames + job.frames), count + 1)
                continue
        merged.append((job, 1))
    return merged


def _describe(job: _Job) -> str:
    if isinstance(job, _Frames):
        return f"{len(job.frames)} frames of {job.session_id} were"
    return f"the history of {job.session_id} was"
