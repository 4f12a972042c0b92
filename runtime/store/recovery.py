"""``ReadOnlyRecovery``: a store that cannot be written, until it can again.

A store that cannot be written (disk full, read-only file, directory or file system,
locked by another process past the busy timeout) still opens, read-only, as long as it
can be read: sessions can be listed and loaded, while creating one and
``require_writable`` raise ``SessionStoreReadOnly`` naming the cause. Each of those calls
first tries a cheap write again (a header field written with its own value), so the store
recovers as soon as the disk does; so does a timer every ``RECOVERY_PROBE_S``, with nothing
asked of it. It then writes what it owes: the gap marks ``FrameLog.resume_seq`` could not
write, then tells its listeners (the journal hands its writer the frames the store refused,
``when_writable``), then the crash discards ``OpenCards.close_open_cards`` could not (of sessions
no live process serves: never a card whose end this process's journal owes). A write that fails
at run time because the disk filled or turned read-only puts it in the same state.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from toolprep.runtime.store.database import StoreDatabase
from toolprep.runtime.store.errors import SessionStoreReadOnly, StoreError

__all__ = ["PROBE_BUSY_TIMEOUT_S", "RECOVERY_PROBE_S", "ReadOnlyRecovery", "WriteSeal"]

logger = logging.getLogger(__name__)

PROBE_BUSY_TIMEOUT_S = 0.1
"""How long a try at writing a read-only store again waits for another process's lock."""

RECOVERY_PROBE_S = 5.0
"""How often a read-only store tries on its own to write again (besides before each new
session or turn), so that it recovers, and writes what it owes, with nothing asked of it."""

WriteSeal = Callable[[str, int, int, bool], None]
"""Write, in a transaction of its own, the gap mark owed to a session: (session id, last
stored, reserved, exact); see ``FrameLog.write_owed_seal``."""


class ReadOnlyRecovery:
    """What the store owes while it cannot be written, and the tries at writing again.

    Built before the parts that owe it writes; ``start`` gives it their writers."""

    def __init__(self, database: StoreDatabase) -> None:
        self._database = database
        self._cards_owed = False
        self._seals_owed: dict[str, tuple[int, int, bool]] = {}
        """Per session, the gap ``resume_seq`` found and could not mark: (last stored,
        reserved, exact)."""
        self._probe_timer: threading.Timer | None = None
        self._write_seal: WriteSeal | None = None
        self._close_open_cards: Callable[[], object] | None = None
        self._on_writable: list[Callable[[], None]] = []

    def start(self, *, write_seal: WriteSeal, close_open_cards: Callable[[], object]) -> None:
        """Pay owed writes with these once the store can be written; if it cannot be now,
        say so and start trying again."""
        self._write_seal = write_seal
        self._close_open_cards = close_open_cards
        database = self._database
        with database.lock:
            database.on_unwritable = self._arm_probe
            cause = database.read_only
        if cause is not None:
            logger.error(
                "the session store %s cannot be written (%s): sessions can be listed and "
                "loaded; new sessions and turns are refused until it can be",
                database.path,
                cause,
            )
            with database.lock:
                self._arm_probe()

    def when_writable(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` each time the store can be written again (on the thread that
        found out), after the store's own owed writes: the journal writes what it owes then."""
        with self._database.lock:
            self._on_writable.append(listener)

    def owe_seal(self, session_id: str, stored: int, reserved: int, exact: bool) -> None:
        """The gap mark for numbers ``stored + 1`` to ``reserved`` is written once the store
        can be written again."""
        with self._database.lock:
            self._seals_owed[session_id] = (stored, reserved, exact)

    def owe_cards(self, every_session: bool) -> None:
        """With the lock held: the crash discards are written, for every session, once the
        store can be written again (a single session's are written when it opens again)."""
        self._cards_owed = self._cards_owed or every_session

    def require_writable(self) -> None:
        """Return if the store can be written; else try again, and raise
        ``SessionStoreReadOnly`` naming the cause if it still cannot.

        Called before a session or a turn starts, so nothing begins that could not be kept.
        Once it can be written again the crash discards owed since are written.
        """
        database = self._database
        with database.lock:
            if database.read_only is None:
                return
            if database.closed:
                raise SessionStoreReadOnly(f"{database.read_only} (and the store is closed)")
            recovered = database.reopen_writable(PROBE_BUSY_TIMEOUT_S)
            cause = database.read_only
            owed = recovered and self._cards_owed
            if recovered:
                self._cards_owed = False
        if not recovered:
            assert cause is not None
            raise SessionStoreReadOnly(cause)
        logger.warning(
            "the session store %s can be written again: new sessions and turns are accepted",
            database.path,
        )
        self._write_owed_seals()
        with database.lock:
            listeners = list(self._on_writable)
        for listener in listeners:
            listener()
        if owed:
            assert self._close_open_cards is not None
            self._close_open_cards()

    def stop(self) -> None:
        """No more tries: the store is closed."""
        with self._database.lock:
            timer, self._probe_timer = self._probe_timer, None
        if timer is not None:
            timer.cancel()

    def _write_owed_seals(self) -> None:
        """The gap marks ``resume_seq`` owes since it found the store read-only."""
        with self._database.lock:
            owed, self._seals_owed = self._seals_owed, {}
        for session_id, (stored, reserved, exact) in owed.items():
            assert self._write_seal is not None
            self._write_seal(session_id, stored, reserved, exact)

    def _arm_probe(self) -> None:
        """With the lock held: try to write again in ``RECOVERY_PROBE_S`` (unless closed)."""
        if self._database.closed or self._probe_timer is not None:
            return
        timer = threading.Timer(RECOVERY_PROBE_S, self._probe_again)
        timer.name, timer.daemon = "toolprep-store-probe", True
        self._probe_timer = timer
        timer.start()

    def _probe_again(self) -> None:
        with self._database.lock:
            self._probe_timer = None
            if self._database.closed:
                return
        try:
            self.require_writable()
        except SessionStoreReadOnly:
            with self._database.lock:
                self._arm_probe()
        except StoreError as exc:  # the owed discards: the next turn's close writes them
            logger.error("after the session store could be written again: %s", exc)
