"""``SessionStore``: sessions, their history and their frames in one SQLite file.

What is kept, per session: where it works (cwd), its model, mode and title, the history
the model sees (saved whole at each turn boundary) and a numbered log of the
``session/update`` frames sent, so that loading the session can replay exactly what the
editor showed.

The store is made of parts with one job each, sharing one connection and its lock
(``database``); callers use the part they need:

- ``sessions`` (``Sessions``): create, read, list, update and delete sessions, and the
  history each keeps;
- ``frame_log`` (``FrameLog``): append, number and replay the frames;
- ``claims`` (``SessionClaims``): which live process serves a session;
- ``cards`` (``OpenCards``): the cards a crash left open, closed with a discard;
- ``recovery`` (``ReadOnlyRecovery``): a store that cannot be written opens read-only,
  refuses new sessions and turns (``require_writable``) and recovers once it can be;
- ``database`` (``StoreDatabase``): the connection, its transactions, and why it cannot be
  written (``read_only_cause``).
"""

from __future__ import annotations

from pathlib import Path

from toolprep.runtime.store.claims import SessionClaims
from toolprep.runtime.store.connection import DEFAULT_SYNCHRONOUS, Synchronous
from toolprep.runtime.store.database import StoreDatabase
from toolprep.runtime.store.frame_log import FrameLog
from toolprep.runtime.store.open_cards import OpenCards
from toolprep.runtime.store.ownership import this_process
from toolprep.runtime.store.recovery import ReadOnlyRecovery
from toolprep.runtime.store.sessions import Sessions

__all__ = ["DEFAULT_BUSY_TIMEOUT_S", "SessionStore"]

DEFAULT_BUSY_TIMEOUT_S = 5.0


class SessionStore:
    """See the module docstring. Thread-safe; close it when done."""

    def __init__(
        self,
        path: Path | str,
        *,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT_S,
        owner: str | None = None,
        synchronous: Synchronous = DEFAULT_SYNCHRONOUS,
    ) -> None:
        """``owner`` names this process in the sessions it creates or claims (default: its
        host, pid and start time; see ``ownership``). ``synchronous``: see ``connection``."""
        self.path = Path(path)
        self.database = StoreDatabase(self.path, busy_timeout=busy_timeout, synchronous=synchronous)
        self.owner = owner or this_process()
        self.synchronous = synchronous
        self.recovery = ReadOnlyRecovery(self.database)
        self.sessions = Sessions(self.database, self.recovery, self.owner)
        self.frame_log = FrameLog(self.database, self.recovery)
        self.claims = SessionClaims(self.database, self.owner)
        self.cards = OpenCards(self.database, self.recovery, self.frame_log, self.owner)
        self.recovery.start(
            write_seal=self.frame_log.write_owed_seal,
            close_open_cards=self.cards.close_open_cards,
        )

    def close(self) -> None:
        self.database.close()
        self.recovery.stop()

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
