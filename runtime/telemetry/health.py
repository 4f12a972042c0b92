"""Whether the daemon is ready to serve: what ``GET /readyz`` answers.

Ready means a new session could be opened and run now: the store (if any) can be written,
and every worker process (if the sessions run in workers) is up. A store that went
read-only (full disk, lost permissions) or a worker waiting out its restart back-off makes
the daemon not ready until it recovers, so a load balancer sends new users elsewhere
meanwhile; ``/healthz`` (alive) stays 200 throughout, so a service manager does not restart
a daemon that is recovering by itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toolprep.runtime.store import SessionStore

__all__ = ["ALWAYS_READY", "Readiness", "readiness"]

Readiness = Callable[[], bool]
"""Called for each ``/readyz``; cheap (a lock and a few reads)."""


def _always() -> bool:
    return True


ALWAYS_READY: Readiness = _always


def readiness(
    store: SessionStore | None,
    worker_pids: Callable[[], list[int]] | None = None,
    workers: int = 0,
) -> Readiness:
    """Ready while ``store`` can be written and ``worker_pids()`` lists all ``workers``."""

    def ready() -> bool:
        if store is not None and store.database.read_only_cause is not None:
            return False
        return worker_pids is None or len(worker_pids()) >= workers

    return ready
