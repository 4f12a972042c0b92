"""The cursor of a page of ``session/list``: where the next page starts.

Sessions are listed most recently updated first, ties by id; a cursor holds the
(updated_at, session id) of the last entry of its page, so the next page starts after
it whatever was created or deleted in between. A daemon that keeps no store pages its
sessions in memory with the same cursors.
"""

from __future__ import annotations

import base64
import binascii

import orjson

from toolprep.runtime.kernel.session_host import SessionInfo

__all__ = ["decode_list_cursor", "encode_list_cursor"]


def encode_list_cursor(info: SessionInfo) -> str:
    """The ``nextCursor`` of a session list page whose last entry is ``info``."""
    return base64.urlsafe_b64encode(orjson.dumps([info.updated_at, info.session_id])).decode()


def decode_list_cursor(cursor: str) -> tuple[float, str]:
    """The (updated_at, session id) a list cursor points after; ``ValueError`` if it is none."""
    try:
        updated_at, session_id = orjson.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (binascii.Error, ValueError, TypeError):
        raise ValueError(f"not a session list cursor: {cursor!r}") from None
    if not isinstance(updated_at, (int, float)) or not isinstance(session_id, str):
        raise ValueError(f"not a session list cursor: {cursor!r}")
    return float(updated_at), session_id
