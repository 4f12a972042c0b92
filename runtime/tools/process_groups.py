"""Process groups started by tool calls, kept until they are known to be gone.

Each shell command runs as the leader of its own process group, so one
signal reaches everything it spawned. A command may return while children
it put in the background (``server &``) still run; those belong to the
turn that started them, and the host stops them when the turn ends, when
the agent shuts down, and (with SIGKILL, at once) when a second signal
forces the agent out.

Stopping is SIGTERM to the whole group, then SIGKILL to whatever is left
after a grace period. Turn ends are announced on a thread that must not
block, so there the SIGKILL comes from a short-lived timer thread instead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence

__all__ = ["ProcessGroups", "group_exists", "signal_group"]

_POLL_S = 0.02


def signal_group(pgid: int, signum: int) -> None:
    """Send ``signum`` to group ``pgid``; a group that is already gone is not an error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def group_exists(pgid: int) -> bool:
    """True while any process (a not yet reaped zombie included) is in group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ProcessGroups:
    """The live process groups of each session's tool calls."""

    def __init__(self, grace_s: float) -> None:
        if grace_s < 0:
            raise ValueError("grace_s must be >= 0")
        self.grace_s = grace_s
        self._lock = threading.Lock()
        self._by_session: dict[str, set[int]] = {}
        # Groups sent SIGTERM whose SIGKILL is still to come: kill_now must see them too.
        self._stopping: set[int] = set()
        self.on_change: Callable[[int, bool], None] | None = None
        """Told ``(pgid, True)`` when a group is tracked and ``(pgid, False)`` when it is
        forgotten, so that a process watching this one can clean up should it die."""

    def _changed(self, groups: Iterable[int], live: bool) -> None:
        notify = self.on_change
        if notify is not None:
            for pgid in groups:
                notify(pgid, live)

    def add(self, session_id: str, pgid: int) -> None:
        with self._lock:
            self._by_session.setdefault(session_id, set()).add(pgid)
        self._changed((pgid,), True)

    def discard(self, session_id: str, pgid: int) -> None:
        with self._lock:
            groups = self._by_session.get(session_id)
            if groups is None or pgid not in groups:
                return
            groups.discard(pgid)
            if not groups:
                del self._by_session[session_id]
        self._changed((pgid,), False)

    def groups(self, session_id: str | None = None) -> frozenset[int]:
        """The groups still tracked for ``session_id`` (every session's if None)."""
        with self._lock:
            return frozenset(self._collect(session_id, remove=False))

    def _collect(self, session_id: str | None, *, remove: bool) -> set[int]:
        if session_id is None:
            found = {pgid for groups in self._by_session.values() for pgid in groups}
            if remove:
                self._by_session.clear()
            return found
        if remove:
            return self._by_session.pop(session_id, set())
        return set(self._by_session.get(session_id, ()))

    def stop(self, session_id: str | None = None, *, wait: bool) -> None:
        """SIGTERM the groups of ``session_id`` (all if None), then SIGKILL what remains.

        ``wait=True`` blocks for at most the grace period; ``wait=False``
        returns at once and leaves the SIGKILL to a timer thread.
        """
        with self._lock:
            groups = self._collect(session_id, remove=True)
            live = [pgid for pgid in groups if group_exists(pgid)]
            self._stopping.update(live)
        self._changed(groups.difference(live), False)
        if not live:
            return
        for pgid in live:
            signal_group(pgid, signal.SIGTERM)
        if not wait:
            timer = threading.Timer(self.grace_s, self._kill_leftovers, args=(tuple(live),))
            timer.name = "toolprep-group-reaper"
            timer.daemon = True
            timer.start()
            return
        deadline = time.monotonic() + self.grace_s
        while time.monotonic() < deadline and any(group_exists(pgid) for pgid in live):
            time.sleep(_POLL_S)
        self._kill_leftovers(live)

    def _kill_leftovers(self, groups: Sequence[int]) -> None:
        for pgid in groups:
            if group_exists(pgid):
                signal_group(pgid, signal.SIGKILL)
        with self._lock:
            self._stopping.difference_update(groups)
        self._changed(groups, False)

    def kill_now(self) -> None:
        """SIGKILL every tracked group without taking the lock.

        Meant for a signal handler, which may run while this very thread
        holds the lock; a group added concurrently may be missed.
        """
        groups: list[int] = []
        with contextlib.suppress(RuntimeError):  # changed during iteration: keep what was read
            groups.extend(tuple(self._stopping))
            for members in list(self._by_session.values()):
                groups.extend(tuple(members))
        for pgid in groups:
            signal_group(pgid, signal.SIGKILL)
