"""What ``session/new``, ``session/load`` and ``session/resume`` ask for, checked.

Each reader refuses a malformed field with ``-32602`` naming it, before the
host is asked anything, so a bad request never half-opens a session.
"""

from __future__ import annotations

import os
from typing import Any

from toolprep.messages.frames import META_KEY
from toolprep.runtime.acp.errors import INVALID_PARAMS, RpcError, require
from toolprep.runtime.mcp.specs import McpServerSpec, parse_servers

__all__ = ["after_seq", "session_directory"]


def session_directory(params: Any) -> tuple[str, tuple[McpServerSpec, ...]]:
    """The ``cwd`` of ``session/new`` or ``session/load`` (an absolute, existing
    directory) and the MCP servers to run for the session.

    A malformed server entry is refused with ``-32602`` naming the field; a
    well-formed one that fails to start does not fail the request (see
    ``SessionHost.open_session``).
    """
    cwd = require(params, "cwd", str)
    if not os.path.isabs(cwd):
        raise RpcError(INVALID_PARAMS, "Invalid params: 'cwd' must be an absolute path")
    if not os.path.isdir(cwd):
        raise RpcError(INVALID_PARAMS, f"Invalid params: 'cwd' is not a directory: {cwd}")
    try:
        servers = parse_servers(params.get("mcpServers"))
    except ValueError as exc:
        raise RpcError(INVALID_PARAMS, f"Invalid params: {exc}") from None
    return cwd, servers


def after_seq(params: Any) -> int:
    """``_meta.toolprep.afterSeq`` of ``session/load``: the number of the last frame the
    client has (each ``session/update`` carries its number as ``_meta.toolprep.seq``); the
    replay sends only the frames after it. 0, or absent: the whole session."""
    meta = params.get("_meta")
    ours = meta.get(META_KEY) if isinstance(meta, dict) else None
    if ours is None:
        return 0
    after = ours.get("afterSeq", 0) if isinstance(ours, dict) else None
    if not isinstance(after, int) or isinstance(after, bool) or after < 0:
        raise RpcError(
            INVALID_PARAMS,
            f"Invalid params: '_meta.{META_KEY}.afterSeq' must be a frame number (an integer "
            f">= 0), not {after!r}",
        )
    return after
