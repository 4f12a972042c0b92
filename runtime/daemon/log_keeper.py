"""``toolprep serve --log-file PATH``: everything the daemon writes to stdout and stderr, in
files rotated by size, kept by a process of its own.

A daemon started by ``connect --start`` runs for weeks, and its log must not fill the disk:
``PATH`` is started afresh once it would pass ``--log-max-bytes``, the full one becoming
``PATH.1`` (``PATH.1`` becoming ``PATH.2``, and so on), and only ``--log-backups`` of them
are kept, so the log never takes more than ``(backups + 1) * max_bytes`` bytes.

Rotating inside the daemon (a ``logging`` handler) would bound only what goes through
``logging``: a crash's traceback, a ``faulthandler`` or stack dump (SIGUSR1), the "second
stop signal" note, and everything the workers (which inherit the daemon's stderr) and
libraries print go to file descriptor 2, and a file rotated under it would be renamed and
deleted while still written, unbounded and unseen. So the daemon's descriptors 1 and 2
become the write end of a pipe, and the keeper, a small process started first, reads the
pipe and writes the files: every byte any process of the daemon writes is kept and counted,
and what a crash writes is still read and written after the daemon is gone (the keeper ends
when the last writer has closed the pipe). The keeper ignores SIGTERM, SIGINT and SIGHUP,
which stop the daemon, so it writes what the daemon says while stopping; it never stops
reading, so a log that cannot be written (a full disk) costs lines, counted in a note once
writing works again, and never blocks the daemon.

Lines are kept whole: a file is started afresh before a line that would not fit, and only a
line longer than ``max_bytes`` is cut (a line's start waits in memory for its end, however
the pipe splits them). The keeper runs as ``python -I -S`` on this very file
and imports nothing but the standard library.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Final

__all__ = [
    "DEFAULT_LOG_BACKUPS",
    "DEFAULT_LOG_MAX_BYTES",
    "KeptOutput",
    "RotatingLog",
    "check_log_bounds",
    "keep_output",
]

DEFAULT_LOG_MAX_BYTES: Final = 10 * 1024 * 1024
DEFAULT_LOG_BACKUPS: Final = 5
_READ_BYTES: Final = 64 * 1024
_DRAIN_S: Final = 10.0
_OPEN_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC


def check_log_bounds(max_bytes: int, backups: int) -> None:
    """``ValueError`` for bounds that would keep no log at all."""
    if max_bytes < 1:
        raise ValueError(f"--log-max-bytes must be >= 1, got {max_bytes}")
    if backups < 1:
        raise ValueError(f"--log-backups must be >= 1, got {backups}")


class RotatingLog:
    """``path`` and its ``backups`` older files, each at most ``max_bytes`` long."""

    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        check_log_bounds(max_bytes, backups)
        self.path, self.max_bytes, self.backups = path, max_bytes, backups
        self._fd = os.open(path, _OPEN_FLAGS, 0o600)
        self._size = os.fstat(self._fd).st_size
        self._pending = b""
        self._lost = 0
        self._cause = ""

    def write(self, data: bytes) -> None:
        """Append the whole lines of ``data`` (the end of an unfinished one waits for the
        rest, unless it is already longer than a file), rotating first whenever the next
        line would not fit; what cannot be written is counted, and said in a note once
        writing works again."""
        data = self._pending + data
        whole = data.rfind(b"\n") + 1
        if len(data) - whole > self.max_bytes:
            whole = len(data)
        self._pending = data[whole:]
        self._append(data[:whole])

    def _append(self, data: bytes) -> None:
        if self._lost:
            note = f"toolprep serve: {self._lost} bytes of this log lost: {self._cause}\n"
            if self._write(note.encode()) > 0:  # still failing: this data is lost too
                self._lost += len(data)
                return
            self._lost = 0
        left = self._write(data)
        if left > 0:
            self._lost += left

    def _write(self, data: bytes) -> int:
        """0 once ``data`` is written; else how many of its bytes were not (the cause in
        ``_cause``)."""
        while data:
            room = self.max_bytes - self._size
            piece = data[: max(room, 0)]
            if len(data) > room:
                whole = piece.rfind(b"\n") + 1
                if whole:
                    piece = piece[:whole]
                elif self._size:  # the next line does not fit: it starts the next file
                    try:
                        self._rotate()
                    except OSError as exc:
                        return self._unwritten(exc, data)
                    continue
            try:
                written = os.write(self._fd, piece)
            except OSError as exc:
                return self._unwritten(exc, data)
            self._size += written
            data = data[written:]
        return 0

    def _unwritten(self, exc: OSError, data: bytes) -> int:
        self._cause = exc.strerror or str(exc)
        return len(data)

    def _rotate(self) -> None:
        """``path.N-1`` -> ``path.N``, ..., ``path`` -> ``path.1``, then a new ``path``
        (the oldest, ``path.N``, is replaced)."""
        for older in range(self.backups, 0, -1):
            newer = self.path if older == 1 else self._backup(older - 1)
            with contextlib.suppress(FileNotFoundError):
                os.replace(newer, self._backup(older))
        fd = os.open(self.path, _OPEN_FLAGS, 0o600)
        os.close(self._fd)
        self._fd, self._size = fd, 0

    def _backup(self, number: int) -> Path:
        return self.path.with_name(f"{self.path.name}.{number}")

    def close(self) -> None:
        """Write the unfinished line, if any (the writers are gone), and close."""
        self._append(self._pending)
        self._pending = b""
        os.close(self._fd)


class KeptOutput:
    """The started keeper; ``drain`` at a clean exit, so the log is whole once the daemon
    is gone (``connect --start`` reads its last line to say why it did not start)."""

    def __init__(self, keeper: subprocess.Popen[bytes]) -> None:
        self._keeper = keeper

    def drain(self, timeout_s: float = _DRAIN_S) -> None:
        """Close this process's stdout and stderr (they become ``/dev/null``) and wait, up
        to ``timeout_s``, for the keeper to write what is left and end."""
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._keeper.wait(timeout_s)  # left to end by itself if a writer lingers


def keep_output(path: Path, max_bytes: int, backups: int) -> KeptOutput:
    """Start the keeper of ``path`` and make this process's stdout and stderr its pipe (the
    children started from now on inherit it); ``ValueError`` or ``OSError`` if it cannot."""
    check_log_bounds(max_bytes, backups)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.close(os.open(path, _OPEN_FLAGS, 0o600))  # one that cannot be written: refused now
    read_end, write_end = os.pipe()
    try:
        keeper = subprocess.Popen(
            [sys.executable, "-I", "-S", __file__, str(path), str(max_bytes), str(backups)],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            close_fds=True,
        )
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os.dup2(write_end, 1)
        os.dup2(write_end, 2)
    finally:
        os.close(read_end)
        os.close(write_end)
    return KeptOutput(keeper)


def _keep(path: Path, max_bytes: int, backups: int) -> int:
    """The keeper: stdin to the rotating log until every writer has closed it."""
    for stop in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(stop, signal.SIG_IGN)
    log = RotatingLog(path, max_bytes, backups)
    while chunk := os.read(0, _READ_BYTES):
        log.write(chunk)
    log.close()
    return 0


if __name__ == "__main__":
    sys.exit(_keep(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])))
