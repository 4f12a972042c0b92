"""``toolprep serve``'s options about connections: how many, how far behind, keepalive
(and ``connect``'s default wait for replies at the end of stdin).

Kept apart from the server and the bridge so the command line can check them
before the WebSocket library loads.
"""

from __future__ import annotations

import argparse
import math
from typing import Final

__all__ = [
    "DEFAULT_MAX_BUFFERED_BYTES",
    "DEFAULT_PING_INTERVAL_S",
    "DEFAULT_PING_TIMEOUT_S",
    "DEFAULT_REPLY_TIMEOUT_S",
    "add_connection_arguments",
    "check_connection_arguments",
]

DEFAULT_MAX_BUFFERED_BYTES: Final = 64 * 1024 * 1024
DEFAULT_PING_INTERVAL_S: Final = 20.0
DEFAULT_PING_TIMEOUT_S: Final = 20.0
DEFAULT_REPLY_TIMEOUT_S: Final = 120.0
"""``connect --reply-timeout``: generous, as a piped prompt's reply comes at its turn's end."""


def add_connection_arguments(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--max-connections",
        type=int,
        default=None,
        metavar="N",
        help="open connections at most; past it an upgrade is answered 503 with Retry-After "
        "(default: from the open files limit, which the daemon raises to its hard limit: "
        "(limit - 256) / 2)",
    )
    serve.add_argument(
        "--max-send-buffer",
        type=int,
        default=DEFAULT_MAX_BUFFERED_BYTES,
        metavar="BYTES",
        help="how far a client may fall behind in reading; past it the daemon closes its "
        "connection (code 1008) and keeps its sessions for a later attach "
        f"(default {DEFAULT_MAX_BUFFERED_BYTES})",
    )
    serve.add_argument(
        "--ping-interval",
        type=float,
        default=DEFAULT_PING_INTERVAL_S,
        metavar="SECONDS",
        help="send a WebSocket ping this often; 0 sends none "
        f"(default {DEFAULT_PING_INTERVAL_S:g})",
    )
    serve.add_argument(
        "--ping-timeout",
        type=float,
        default=DEFAULT_PING_TIMEOUT_S,
        metavar="SECONDS",
        help="close a connection whose pong is this late; 0 waits without end "
        f"(default {DEFAULT_PING_TIMEOUT_S:g})",
    )


def check_connection_arguments(args: argparse.Namespace) -> None:
    """``ValueError`` for a connection option nothing could serve with."""
    if args.max_connections is not None and args.max_connections < 1:
        raise ValueError(f"--max-connections must be >= 1, got {args.max_connections}")
    if args.max_send_buffer < 1:
        raise ValueError(f"--max-send-buffer must be >= 1 byte, got {args.max_send_buffer}")
    for name in ("ping_interval", "ping_timeout"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"--{name.replace('_', '-')} must be >= 0 seconds, got {value}")
