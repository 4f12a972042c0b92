"""Sessions kept in a SQLite file, so they outlive the process that served them."""

from toolprep.runtime.kernel.session_host import SessionInfo
from toolprep.runtime.store.errors import (
    SessionNotStored,
    SessionOwnedElsewhere,
    StoreError,
)
from toolprep.runtime.store.session_store import SessionStore
from toolprep.runtime.store.sessions import StoredSession

__all__ = [
    "SessionInfo",
    "SessionNotStored",
    "SessionOwnedElsewhere",
    "SessionStore",
    "StoreError",
    "StoredSession",
]
