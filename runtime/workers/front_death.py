"""A worker ends the moment its front dies, before it starts anything else.

Without this, a front killed outright (``kill -9``) leaves its workers running
turns nobody sees: their tool calls go on changing files. On Linux the worker
asks the kernel for ``FRONT_DIED_SIGNAL`` when its parent goes
(``prctl(PR_SET_PDEATHSIG)``). The kernel sends it when the *thread* that
forked the worker ends, not only the process, and a front may start a
replacement worker from a thread that ends later; so the handler acts only
when the parent really changed from the front's pid, which the front passes in
``FRONT_PID_ENV``. Elsewhere there is no death signal and the worker ends when
its stdin closes.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType

__all__ = ["FRONT_DIED_SIGNAL", "FRONT_PID_ENV", "FrontWatch", "front_env"]

logger = logging.getLogger(__name__)

FRONT_PID_ENV = "TOOLPREP_FRONT_PID"
# Not used elsewhere: SIGTERM asks a worker to stop, SIGUSR1 dumps stacks.
FRONT_DIED_SIGNAL = signal.SIGUSR2
_PR_SET_PDEATHSIG = 1


def front_env(base: dict[str, str]) -> dict[str, str]:
    """``base`` plus this process's pid as the front of the worker it starts."""
    return {**base, FRONT_PID_ENV: str(os.getpid())}


def _set_parent_death_signal(signum: int) -> bool:
    if not sys.platform.startswith("linux"):
        logger.debug("no parent-death signal on %s; a worker ends when stdin closes", sys.platform)
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
        logger.warning("prctl(PR_SET_PDEATHSIG) failed: %s", os.strerror(ctypes.get_errno()))
        return False
    return True


class FrontWatch:
    """Exits this worker, after killing its tool processes, once its front is gone.

    ``stop_tools`` is set once the runtime exists; until then there is nothing to kill.
    """

    def __init__(self, front_pid: int) -> None:
        self.front_pid = front_pid
        self.stop_tools: Callable[[], None] | None = None

    @classmethod
    def from_env(cls) -> FrontWatch:
        """The front named in the environment, else this process's parent (an embedder's)."""
        # Taken out, so that the tool processes of this worker do not inherit it.
        named = os.environ.pop(FRONT_PID_ENV, "")
        return cls(int(named) if named.isdigit() else os.getppid())

    def start(self) -> None:
        """Ask for the death signal, then exit at once if the front died before that."""
        signal.signal(FRONT_DIED_SIGNAL, self._handle)
        _set_parent_death_signal(FRONT_DIED_SIGNAL)
        self.check()

    def check(self) -> None:
        if os.getppid() != self.front_pid:
            self._exit(FRONT_DIED_SIGNAL)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.check()  # else only the thread that started this worker ended

    def _exit(self, signum: int) -> None:
        if self.stop_tools is not None:
            with contextlib.suppress(Exception):
                self.stop_tools()
        os._exit(128 + signum)
