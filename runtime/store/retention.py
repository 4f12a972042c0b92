"""Sessions kept for a bounded time (``serve --retain-days``), and their space given back.

A daemon's store only grows unless someone deletes sessions: editors rarely do. With a
retention period, a sweep at start and then every ``SWEEP_INTERVAL_S`` deletes the sessions
nobody has updated for that long, as ``session/delete`` would (the id stays taken, so it is
never reused), but never one a live process serves: an attached client or a running turn
keeps a session, whatever its age. Then it gives the pages they freed back to the file
system, ``RECLAIM_PAGES`` at a time, each step a short write of its own, so a turn waiting
for the store waits at most one step.

Every deletion and every step is a transaction of its own: a sweep of thousands of
sessions never holds the store for more than one of them.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Final

from toolprep.runtime.store.errors import SessionNotStored, SessionOwnedElsewhere, StoreError
from toolprep.runtime.store.session_store import SessionStore

__all__ = ["RECLAIM_PAGES", "SWEEP_INTERVAL_S", "Retention", "SweepResult"]

logger = logging.getLogger(__name__)

SWEEP_INTERVAL_S: Final = 3600.0
"""How often a running daemon looks for sessions past their retention."""

SWEEP_BATCH: Final = 100
"""Sessions looked at per query of a sweep."""

RECLAIM_PAGES: Final = 256
"""Free pages given back per write (1 MiB at SQLite's default page size)."""


@dataclass(frozen=True, slots=True)
class SweepResult:
    deleted: int
    pages_reclaimed: int


class Retention:
    """Deletes the sessions of ``store`` untouched for ``retain_s`` seconds: ``sweep`` once,
    or ``start`` a thread that sweeps now and every ``interval_s`` until ``stop``."""

    def __init__(
        self, store: SessionStore, retain_s: float, interval_s: float = SWEEP_INTERVAL_S
    ) -> None:
        if not retain_s > 0:  # also rejects NaN
            raise ValueError(f"the retention period must be > 0 seconds, got {retain_s}")
        self.store = store
        self.retain_s = retain_s
        self.interval_s = interval_s
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def sweep(self, now: float | None = None) -> SweepResult:
        """Delete what is past its retention at ``now`` (default: the time now), then give
        back the pages it freed."""
        cutoff = (time.time() if now is None else now) - self.retain_s
        sessions = self.store.sessions
        deleted, after = 0, None
        while not self._stopped.is_set():
            found = sessions.untouched_since(cutoff, SWEEP_BATCH, after)
            if not found:
                break
            for _, session_id in found:
                try:
                    sessions.delete(session_id, unless_served=True)
                except SessionOwnedElsewhere:
                    pass  # a live process serves it: not ours to delete
                except SessionNotStored:
                    pass  # deleted meanwhile by a client
                else:
                    deleted += 1
            after = found[-1]  # the served ones are passed, however many there are
        return SweepResult(deleted, self._reclaim())

    def _reclaim(self) -> int:
        reclaimed = 0
        while not self._stopped.is_set():
            step = self.store.database.reclaim_free_pages(RECLAIM_PAGES)
            reclaimed += step
            if step < RECLAIM_PAGES:
                break
        return reclaimed

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="toolprep-retention", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                result = self.sweep()
            except StoreError as exc:  # a read-only store, say: the next sweep tries again
                logger.warning("retention sweep failed: %s", exc)
            else:
                if result.deleted or result.pages_reclaimed:
                    logger.info(
                        "retention: deleted %d sessions untouched for %g days, gave back "
                        "%d free pages",
                        result.deleted,
                        self.retain_s / 86400,
                        result.pages_reclaimed,
                    )
            self._stopped.wait(self.interval_s)
