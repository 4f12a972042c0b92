"""What the session store raises: every SQLite failure becomes a ``StoreError`` that names
the file and what was being done, so a corrupt, locked or full database is a clear message
and never a traceback.

The more specific ones are also the session host's errors (``session_host``), so a host
answers them as it answers the same refusal from any other archive.
"""

from __future__ import annotations

from toolprep.runtime.kernel.session_host import (
    SessionServedElsewhere,
    StoreReadOnly,
    UnknownSession,
)
from toolprep.runtime.store.ownership import describe_owner

__all__ = ["SessionNotStored", "SessionOwnedElsewhere", "SessionStoreReadOnly", "StoreError"]


class StoreError(Exception):
    """The session database could not do what was asked; the message says which file and why.

    ``cause`` is what SQLite (or the OS) said, without the file and the action: failures
    of one cause are counted together (see ``failure_log``). ``locked``: it failed because
    another connection held the write lock past the busy timeout.
    """

    def __init__(self, message: str, *, cause: str | None = None, locked: bool = False) -> None:
        super().__init__(message)
        self.cause = cause if cause is not None else message
        self.locked = locked


class SessionNotStored(StoreError, UnknownSession):
    """No stored session has this id (never created, or deleted)."""

    def __init__(self, session_id: str) -> None:
        UnknownSession.__init__(self, session_id)
        self.cause = str(self)


class SessionOwnedElsewhere(StoreError, SessionServedElsewhere):
    """Another live process owns the session (see ``ownership``); ``owner`` is its name."""

    def __init__(self, session_id: str, owner: str) -> None:
        SessionServedElsewhere.__init__(self, session_id, describe_owner(owner))
        self.cause = str(self)
        self.owner = owner


class SessionStoreReadOnly(StoreError, StoreReadOnly):
    """The store cannot be written now; ``cause`` says why (see ``recovery``)."""

    def __init__(self, cause: str) -> None:
        StoreReadOnly.__init__(self, cause)
