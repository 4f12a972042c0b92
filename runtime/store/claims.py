"""``SessionClaims``: which live process serves each stored session.

A session is owned by the process serving it (named as ``ownership`` names a process):
the one that created it, or the one that opened it again after its owner was gone. A
session served by a live process cannot be opened by another, nor deleted under it; the
owner releases it when it closes the session.
"""

from __future__ import annotations

import sqlite3

from toolprep.runtime.store.database import StoreDatabase, require_session
from toolprep.runtime.store.errors import SessionOwnedElsewhere, StoreError
from toolprep.runtime.store.ownership import owner_alive

__all__ = ["SessionClaims", "refuse_if_served_elsewhere"]


class SessionClaims:
    """Claims and releases sessions for ``owner`` (this process)."""

    def __init__(self, database: StoreDatabase, owner: str) -> None:
        self._database = database
        self.owner = owner

    def claim(self, session_id: str) -> None:
        """Make this process the session's owner, unless a live process serves it.

        Called before a stored session is opened again; raises
        ``SessionOwnedElsewhere`` naming the owner if it still runs. A read-only
        store only checks: the session can be loaded but not claimed.
        """
        if self._database.read_only_cause is not None:
            self._check_owner(session_id)
            return
        try:
            with self._database.transaction(f"claim session {session_id}") as db:
                require_session(db, session_id)
                refuse_if_served_elsewhere(db, session_id, self.owner)
                db.execute("UPDATE sessions SET owner = ? WHERE id = ?", (self.owner, session_id))
        except StoreError:
            if self._database.read_only_cause is None:
                raise
            # This very write found the store unwritable (a full disk, another process's
            # lock): it is loaded unclaimed, as any read-only store loads it.
            self._check_owner(session_id)

    def _check_owner(self, session_id: str) -> None:
        with self._database.transaction(f"check the owner of {session_id}", read=True) as db:
            require_session(db, session_id)
            refuse_if_served_elsewhere(db, session_id, self.owner)

    def release(self, session_id: str) -> None:
        """This process no longer serves the session: another may open it."""
        if self._database.read_only_cause is not None:
            return  # it could not claim it either
        with self._database.transaction(f"release session {session_id}") as db:
            db.execute(
                "UPDATE sessions SET owner = NULL WHERE id = ? AND owner = ?",
                (session_id, self.owner),
            )


def refuse_if_served_elsewhere(db: sqlite3.Connection, session_id: str, owner: str) -> None:
    """In a transaction: raise ``SessionOwnedElsewhere`` if a live process other than
    ``owner`` serves the session."""
    (serving,) = db.execute("SELECT owner FROM sessions WHERE id = ?", (session_id,)).fetchone()
    if serving is not None and serving != owner and owner_alive(serving):
        raise SessionOwnedElsewhere(session_id, serving)
