"""Sessions kept in a SQLite file, so they outlive the process that served them."""

from toolprep.runtime.session_host import SessionInfo
from toolprep.runtime.store.session_store import (
    SessionNotStored,
    SessionStore,
    StoredSession,
    StoreError,
)

__all__ = ["SessionInfo", "SessionNotStored", "SessionStore", "StoreError", "StoredSession"]
