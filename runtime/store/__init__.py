"""Sessions kept in a SQLite file, so they outlive the process that served them."""

from toolprep.runtime.session_host import SessionInfo
from toolprep.runtime.store.session_store import (
    SessionNotStored,
    SessionOwnedElsewhere,
    SessionStore,
    StoredSession,
    StoreError,
)

__all__ = [
    "SessionInfo",
    "SessionNotStored",
    "SessionOwnedElsewhere",
    "SessionStore",
    "StoreError",
    "StoredSession",
]
