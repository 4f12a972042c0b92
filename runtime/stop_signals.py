"""SIGTERM and SIGINT as a request to stop, acted on by the main loop.

A Python signal handler runs on the main thread between two bytecodes,
possibly while that thread is inside a buffered write or holds a lock, so
the first signal only records itself: the main loop notices and ends every
running turn exactly as the end of stdin does (replies written, cards given
their terminal updates, tool processes stopped), then exits 0. Doing real
work in the handler is what used to kill an interrupted agent with
``_enter_buffered_busy``.

A second signal means the graceful path is stuck or the user is done
waiting: the handler SIGKILLs the tool processes and leaves at once with the
conventional ``128 + signal`` status, touching only raw file descriptors.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["STOP_SIGNALS", "StopSignals"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_FORCED_NOTE = b"toolprep: second stop signal, exiting without waiting\n"


class StopSignals:
    """Records the first stop signal; forces the process out on the second."""

    def __init__(self) -> None:
        self.received: signal.Signals | None = None
        self.on_force: Callable[[], None] = lambda: None
        self._previous: dict[signal.Signals, Any] = {}

    def install(self) -> None:
        """Take over SIGTERM and SIGINT; must be called on the main thread."""
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

    @property
    def requested(self) -> bool:
        return self.received is not None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signal.Signals(signum)
            return
        with contextlib.suppress(Exception):
            self.on_force()
        with contextlib.suppress(OSError):
            os.write(2, _FORCED_NOTE)  # fd 2 directly: sys.stderr's lock may be held
        os._exit(128 + signum)
