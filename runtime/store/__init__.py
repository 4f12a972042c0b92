"""Sessions kept in a SQLite file, so they outlive the process that served them."""

from toolprep.runtime.store.session_store import (
    SessionInfo,
    SessionStore,
    StoredSession,
    StoreError,
)

__all__ = ["SessionInfo", "SessionStore", "StoreError", "StoredSession"]
