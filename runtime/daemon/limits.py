"""How many connections the daemon takes, and what it does when the process runs out of files.

Every connection is a file descriptor, and so are the store, the worker
pipes and the provider sockets. The daemon raises its soft ``RLIMIT_NOFILE``
to the hard limit at start (the soft default, often 1024, is a leftover of
``select``), keeps ``FD_RESERVE`` (at most half the limit) for its own use
and counts two descriptors per connection (its socket, and its share of
provider sockets while its sessions stream). Past ``--max-connections`` an upgrade is answered 503
with ``Retry-After`` before the WebSocket opens.

If descriptors run out all the same (other processes' limits, a low hard
limit), ``accept`` fails with EMFILE: the daemon's accept loop (``acceptor``)
stops accepting for a second and tries again, on asyncio's loop and
uvloop's alike. ``AcceptErrors`` reports it as one warning per
``_REPORT_EVERY_S`` instead of a line per attempt.
"""

from __future__ import annotations

import errno
import logging
import resource
import time
from typing import Final

__all__ = [
    "FD_RESERVE",
    "OUT_OF_FILES",
    "RETRY_AFTER_S",
    "AcceptErrors",
    "default_max_connections",
    "raise_open_files_limit",
]

logger = logging.getLogger(__name__)

FD_RESERVE: Final = 256
"""Descriptors kept for the daemon itself: store, logs, worker pipes, MCP servers."""

RETRY_AFTER_S: Final = 5
"""The ``Retry-After`` of a 503 refusal: long enough for connections to end."""

_FD_PER_CONNECTION: Final = 2
_REPORT_EVERY_S: Final = 10.0
OUT_OF_FILES: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
"""The ``accept`` errors that mean the process (or the system) is out of descriptors or memory."""


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft limit on open files to the hard one, if allowed; (soft, hard) after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:  # e.g. an unlimited hard limit some systems refuse
            logger.info("could not raise the open files limit from %d to %d: %s", soft, hard, exc)
    return soft, hard


def default_max_connections(soft_limit: int) -> int:
    """What ``--max-connections`` is when not given, for this soft ``RLIMIT_NOFILE``."""
    if soft_limit == resource.RLIM_INFINITY:
        soft_limit = 1 << 20
    reserve = min(FD_RESERVE, soft_limit // 2)
    return max(1, (soft_limit - reserve) // _FD_PER_CONNECTION)


class AcceptErrors:
    """Out-of-descriptor accepts as one line now and then, with how many there were."""

    def __init__(self) -> None:
        self._last_report = -_REPORT_EVERY_S
        self._since_report = 0

    def report(self, exc: OSError) -> None:
        self._since_report += 1
        now = time.monotonic()
        if now - self._last_report < _REPORT_EVERY_S:
            return
        logger.warning(
            "cannot accept connections: %s (%d time(s) since the last report); new "
            "connections wait and are accepted again in a moment. Raise the open files "
            "limit (ulimit -n) or lower --max-connections",
            exc.strerror or exc,
            self._since_report,
        )
        self._last_report = now
        self._since_report = 0
