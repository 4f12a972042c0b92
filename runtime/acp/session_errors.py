"""The agent's own JSON-RPC server errors, and how the host's refusals become them.

JSON-RPC leaves the -32000 range to servers; each code here says one reason a
session could not be opened, used or found, and its ``data`` carries what a
client needs to act on it (whom to ask, when to retry). Every handler maps a
refusal through these functions, so one refusal reads the same from any method.
"""

from __future__ import annotations

import math

from toolprep.runtime.acp.errors import RpcError
from toolprep.runtime.kernel.session_host import (
    NoWorkerAvailable,
    SessionLimitReached,
    SessionServedElsewhere,
    StoreReadOnly,
)

__all__ = [
    "NO_WORKER",
    "SESSION_IN_USE",
    "SESSION_LIMIT",
    "SESSION_NOT_FOUND",
    "STORE_READ_ONLY",
    "TURN_RUNNING",
    "in_use",
    "no_worker",
    "read_only",
    "session_limit",
]

SESSION_NOT_FOUND = -32002
SESSION_LIMIT = -32001
"""A server error (the -32000 range JSON-RPC leaves to servers): no room for another session."""
SESSION_IN_USE = -32003
"""A server error: another live toolprep process serves the session (``data.holder`` names it)."""
STORE_READ_ONLY = -32004
"""A server error: the session store cannot be written, so no session or turn starts
(``data.cause`` says why); listing and loading sessions still work."""
TURN_RUNNING = -32006
"""A server error: the session is running a turn already (one at a time); the prompt was
refused and left out of the session. Wait for the running turn's reply, or cancel it."""
NO_WORKER = -32005
"""A server error: the worker process serving the session (or, for a new session, every
worker process) is down, waiting to restart (``data.retryAfter`` says in how many seconds,
a whole number, at least 1, it starts again)."""


def session_limit(exc: SessionLimitReached) -> RpcError:
    return RpcError(SESSION_LIMIT, str(exc), {"maxSessions": exc.limit})


def in_use(exc: SessionServedElsewhere) -> RpcError:
    return RpcError(SESSION_IN_USE, str(exc), {"sessionId": exc.session_id, "holder": exc.holder})


def read_only(exc: StoreReadOnly) -> RpcError:
    return RpcError(STORE_READ_ONLY, str(exc), {"cause": exc.cause})


def no_worker(exc: NoWorkerAvailable) -> RpcError:
    """``retryAfter`` is whole seconds, at least 1: a worker that is restarting now (no wait
    left) still needs a moment before it serves, and a client told 0 would spin."""
    return RpcError(NO_WORKER, str(exc), {"retryAfter": max(1, math.ceil(exc.retry_after))})
