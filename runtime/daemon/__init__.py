"""``toolprep serve``: a daemon whose sessions belong to it, not to the connection that opened
them. The server (``server``) imports the WebSocket library; the pool does not."""

from toolprep.runtime.daemon.session_pool import DEFAULT_GRACE_S, PoolClient, SessionPool
from toolprep.runtime.daemon.shared_session import ClientConnection, SharedSession

__all__ = ["DEFAULT_GRACE_S", "ClientConnection", "PoolClient", "SessionPool", "SharedSession"]
