"""Swap two paths again and again until SIGTERM, counting the swaps in a shared file.

Run as its own process by the race tests, so the swaps happen truly in
parallel with the tool calls (a thread would only swap when the interpreter
lock lets it). Each swap is one ``renameat2(RENAME_EXCHANGE)``, so at every
instant one path is the real directory and the other the symlink; where libc
has no ``renameat2``, three plain renames do the same with a brief gap.

    python dir_flipper.py FIRST SECOND COUNTER_FILE

``COUNTER_FILE`` holds 8 bytes: the number of swaps made so far, little-endian.
Tests start it with ``flipping``, which also reads the counter.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import signal
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

COUNTER = struct.Struct("<Q")
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchanger(first: str, second: str) -> Callable[[], None]:
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        park = first + ".park"

        def three_renames() -> None:
            os.rename(first, park)
            os.rename(second, first)
            os.rename(park, second)

        return three_renames
    a, b = os.fsencode(first), os.fsencode(second)

    def exchange() -> None:
        if renameat2(_AT_FDCWD, a, _AT_FDCWD, b, _RENAME_EXCHANGE) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), first)

    return exchange


def main(argv: list[str]) -> None:
    first, second, counter = argv
    stop = False

    def on_term(signum: int, frame: FrameType | None) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    swap = _exchanger(first, second)
    with open(counter, "r+b") as file, mmap.mmap(file.fileno(), COUNTER.size) as shared:
        count = 0
        while not stop:
            swap()
            count += 1
            COUNTER.pack_into(shared, 0, count)


_DEADLINE = 60.0


@dataclass
class Flipper:
    """The running flipper process and its shared swap counter."""

    shared: mmap.mmap

    def flips(self) -> int:
        count: int = COUNTER.unpack_from(self.shared, 0)[0]
        return count

    def wait_past(self, seen: int) -> int:
        """Wait (polling, generous deadline) until more than ``seen`` swaps were made."""

        # Imported here: the flipper process runs this file as a script, without the suite.
        from tests.support.eventually import eventually

        def past() -> int:
            now = self.flips()
            assert now > seen, f"the flipper stalled at {now} swaps"
            return now

        return eventually(past, timeout=_DEADLINE, interval=0.0001)


@contextmanager
def flipping(first: Path, second: Path, counter: Path) -> Iterator[Flipper]:
    """Run the flipper on ``first`` and ``second`` for the block; ``counter`` is a scratch file.

    On leaving, the flipper is stopped and must have exited cleanly (a failed
    swap fails the test).
    """
    counter.write_bytes(bytes(COUNTER.size))
    command = [sys.executable, __file__, str(first), str(second), str(counter)]
    with (
        open(counter, "r+b") as file,
        mmap.mmap(file.fileno(), COUNTER.size) as shared,
        subprocess.Popen(command, stderr=subprocess.PIPE) as proc,
    ):
        flipper = Flipper(shared)
        try:
            yield flipper
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=_DEADLINE)
        assert proc.returncode == 0, err.decode(errors="replace")


if __name__ == "__main__":
    main(sys.argv[1:])
