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
where a stuck turn hangs without stopping the others. The dump is written
by a thread of its own that holds the GIL while it walks the other threads'
frames, so none of them can change under it; ``faulthandler``'s C-level
handler walks them without the GIL and crashed the process (SIGSEGV) when a
thread was busy importing at that moment. That thread learns of the signal
through Python's wakeup file descriptor, which the C-level part of every
Python signal handler writes to from whichever thread the kernel chose, so
the dump comes even while the main thread sits in a read that never returns
to the interpreter (a worker waiting for its next command).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["DUMP_SIGNALS", "STOP_SIGNALS", "StopSignals", "dump_stacks_on_signal"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

DUMP_SIGNALS = (signal.SIGQUIT, signal.SIGUSR1)
"""Signals that dump every thread's stack to stderr instead of ending the process."""

_FORCED_NOTE = b"toolprep: second stop signal, exiting without waiting\n"


def dump_stacks_on_signal(install: bool = True) -> None:
    """Make each of ``DUMP_SIGNALS`` dump all threads' stacks to stderr (or stop doing so).

    Must be called on the main thread: it takes over Python's wakeup file
    descriptor (the previous one comes back when the dumping stops).
    """
    global _dumper
    if install and _dumper is None:
        _dumper = _StackDumper(sys.stderr.fileno())
    elif not install and _dumper is not None:
        _dumper.stop()
        _dumper = None


class _StackDumper:
    """A thread that writes every thread's stack to ``fd`` each time a dump signal arrives."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)  # the signal handler must never block on it
        self._previous_wakeup = signal.set_wakeup_fd(self._wake_write, warn_on_full_buffer=False)
        self._previous: dict[signal.Signals, Any] = {
            signum: signal.signal(signum, _noted_by_the_wakeup_fd) for signum in DUMP_SIGNALS
        }
        self._thread = threading.Thread(target=self._run, name="toolprep-stack-dump", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        signal.set_wakeup_fd(self._previous_wakeup)
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        os.close(self._wake_write)  # the thread reads the end of the pipe and leaves
        self._thread.join()

    def _run(self) -> None:
        dump_numbers = {int(signum) for signum in DUMP_SIGNALS}
        try:
            while woken := os.read(self._wake_read, 64):
                # Each byte is the number of a signal that has a Python handler; the stop
                # signals' bytes are the main loop's business.
                if not dump_numbers.isdisjoint(woken):
                    with contextlib.suppress(OSError):
                        faulthandler.dump_traceback(self._fd, all_threads=True)
        finally:
            os.close(self._wake_read)


def _noted_by_the_wakeup_fd(signum: int, frame: FrameType | None) -> None:
    """The Python half of a dump signal: nothing; its C half woke the dumping thread."""


_dumper: _StackDumper | None = None


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
