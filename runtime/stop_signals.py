"""SIGTERM, SIGINT and SIGHUP as a request to stop, acted on by the main loop.

A Python signal handler runs on the main thread between two bytecodes,
possibly while that thread is inside a buffered write or holds a lock, so
the first signal only records itself: the main loop notices and ends every
running turn exactly as the end of stdin does (replies written, cards given
their terminal updates, tool processes stopped), then exits 0. Doing real
work in the handler is what used to kill an interrupted agent with
``_enter_buffered_busy``. SIGHUP (the terminal or the ssh connection went
away, or a service manager's "reload") takes the same path: there is no
configuration to reload, and dying on the default action would leave
clients without replies and cards without their terminal update.

A second signal means the graceful path is stuck or the user is done
waiting: the handler SIGKILLs the tool processes and leaves at once with the
conventional ``128 + signal`` status, touching only raw file descriptors.

SIGQUIT and SIGUSR1 (``DUMP_SIGNALS``) write every thread's stack to stderr
and change nothing else: the process goes on serving. That is how to see
where a stuck turn hangs without stopping the others. ``faulthandler``
does the writing from its own C-level handler, which only writes to the
file descriptor, so it works even while the main thread is blocked.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["DUMP_SIGNALS", "STOP_SIGNALS", "StopSignals", "dump_stacks_on_signal"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

DUMP_SIGNALS = (signal.SIGQUIT, signal.SIGUSR1)
"""Signals that dump every thread's stack to stderr instead of ending the process."""

_FORCED_NOTE = b"toolprep: second stop signal, exiting without waiting\n"


def dump_stacks_on_signal(install: bool = True) -> None:
    """Make each of ``DUMP_SIGNALS`` dump all threads' stacks to stderr (or stop doing so)."""
    for signum in DUMP_SIGNALS:
        if install:
            faulthandler.register(signum, file=sys.stderr, all_threads=True, chain=False)
        else:
            faulthandler.unregister(signum)


class StopSignals:
    """Records the first stop signal; forces the process out on the second."""

    def __init__(self) -> None:
        self.received: signal.Signals | None = None
        self.on_force: Callable[[], None] = lambda: None
        self._previous: dict[signal.Signals, Any] = {}

    def install(self) -> None:
        """Take over the stop and dump signals; must be called on the main thread."""
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        dump_stacks_on_signal()

    def restore(self) -> None:
        if self._previous:
            dump_stacks_on_signal(install=False)
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
