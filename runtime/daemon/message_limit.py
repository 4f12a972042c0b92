"""The one message limit the daemon, its clients and ``toolprep connect`` share.

The daemon reads messages up to ``--max-message-bytes`` and cuts the frames it
sends to fit it (``frame_fit``). It says the number in a header of its
WebSocket handshake response, so ``toolprep connect`` bridges with the
daemon's own limit rather than a default of its own that may differ: an
editor line the daemon would refuse is refused by the bridge, with the same
error ``toolprep acp`` gives, and the bridge goes on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = ["LIMIT_HEADER", "announced_limit"]

LIMIT_HEADER: Final = "Toolprep-Max-Message-Bytes"


def announced_limit(headers: Mapping[str, str] | None) -> int | None:
    """The limit a handshake response announces; None if it announces none (an older
    daemon) or something that is not a positive whole number."""
    if headers is None:
        return None
    value = headers.get(LIMIT_HEADER)
    if value is None or not value.isdigit():
        return None
    limit = int(value)
    return limit if limit >= 1 else None
