"""One data directory, one daemon: ``serve.lock``, locked for as long as the daemon lives.

Two daemons on one data directory cannot both be found: ``serve.json`` names one of them,
and the clean exit of the one it names removes it while the other keeps serving, unseen.
So a daemon takes an exclusive ``flock`` on ``serve.lock`` in its data directory before it
opens its store or starts a worker, and holds it until it exits; a second one finds it
taken and refuses to start, naming the first as its ``serve.json`` records it (pid and
address). The lock belongs to the kernel, not to the file: a daemon killed with SIGKILL, or
crashed, releases it by dying, so neither its ``serve.lock`` nor a stale ``serve.json``
keeps a new daemon from starting. The descriptor is not inherited (``O_CLOEXEC``; workers
are started with ``exec``), so a child that outlives its daemon holds nothing.

A data directory where the lock file cannot be created (a read-only directory or file
system, a full disk) or locked is not a reason to refuse: the daemon starts unguarded and
says so in one warning (such a directory cannot hold a second daemon's ``serve.json``
either, so no daemon there can hide another). A ``serve.lock``
left there by an earlier daemon is still locked, as ``flock`` needs no write access.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from toolprep.runtime.daemon.autostart import daemon_running
from toolprep.runtime.daemon.discovery import DaemonFileError, read_daemon_file

__all__ = ["DAEMON_LOCK", "DaemonLock", "DataDirInUse", "data_dir_in_use", "lock_data_dir"]

logger = logging.getLogger(__name__)

DAEMON_LOCK: Final = "serve.lock"
_MAX_PID_BYTES: Final = 32
_CONTENDED_S: Final = 1.0
_RETRY_S: Final = 0.02
_UNGUARDED: Final = "nothing keeps a second daemon off this data directory"


class DataDirInUse(Exception):
    """Another live daemon holds the data directory's lock: the one line saying which."""


@dataclass(slots=True)
class DaemonLock:
    """The held lock (``fd``), or None where the directory could not hold one."""

    path: Path
    fd: int | None

    def release(self) -> None:
        """Unlock by closing: after this, another daemon may start on the directory."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def lock_data_dir(data_dir: Path) -> DaemonLock:
    """Lock ``data_dir`` (created 0700 if missing) for this process until ``release`` or
    exit; ``DataDirInUse`` naming the daemon that holds it.

    A lock found taken is tried again for ``_CONTENDED_S``: ``connect --start`` takes it
    for an instant to learn whether a daemon holds it (``data_dir_in_use``), and a daemon
    starting in that instant must not take it for another daemon's.
    """
    path = data_dir / DAEMON_LOCK
    fd = _open_lock_file(data_dir, path)
    if fd is None:
        return DaemonLock(path, None)
    deadline = time.monotonic() + _CONTENDED_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() < deadline:
                time.sleep(_RETRY_S)
                continue
            os.close(fd)
            raise DataDirInUse(_in_use_message(data_dir)) from None
        except OSError as exc:  # a file system without locks: unguarded, as read-only
            os.close(fd)
            logger.warning("cannot lock %s (%s): %s", path, exc.strerror, _UNGUARDED)
            return DaemonLock(path, None)
    with contextlib.suppress(OSError):  # only for the message a second daemon prints
        os.ftruncate(fd, 0)
        os.pwrite(fd, b"%d\n" % os.getpid(), 0)
    return DaemonLock(path, fd)


def data_dir_in_use(data_dir: Path) -> str | None:
    """The line naming the live daemon that holds ``data_dir``'s lock, or None if none does
    (also when there is no lock file, or it cannot be opened): what ``connect --start``
    asks before it starts a daemon that would only refuse."""
    try:
        fd = os.open(data_dir / DAEMON_LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _in_use_message(data_dir)
    except OSError:
        return None
    finally:
        os.close(fd)  # releases the shared lock, if it was taken
    return None


def _open_lock_file(data_dir: Path, path: Path) -> int | None:
    """The lock file's descriptor; None (and a warning) where the directory cannot hold one
    (read-only, full): the daemon then runs unguarded rather than not at all."""
    flags = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY
    try:
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT | flags, 0o600)
    except OSError as exc:
        cause = exc
    try:  # an existing lock file locks as well read-only
        return os.open(path, os.O_RDONLY | flags)
    except OSError:
        logger.warning("cannot create %s (%s): %s", path, cause.strerror, _UNGUARDED)
        return None


def _in_use_message(data_dir: Path) -> str:
    """Who holds the lock: as ``serve.json`` says, if it names the pid the lock file holds
    (else it is a dead daemon's, or the holder has not written its own yet)."""
    holder = _pid_in_lock_file(data_dir / DAEMON_LOCK)
    try:
        address = read_daemon_file(data_dir)
    except DaemonFileError:
        address = None
    if address is None or (holder is not None and address.pid != holder):
        who = f"pid {holder}" if holder is not None else "its pid unknown"
        return (
            f"another toolprep serve ({who}) already runs on the data directory {data_dir}, "
            "and no serve.json of its own says where (it may be starting or stopping): one "
            "data directory serves one daemon; stop that one, or pass another --data-dir"
        )
    return (
        f"another toolprep serve (pid {address.pid}, {address.url}) already runs on the data "
        f"directory {data_dir}: one data directory serves one daemon; connect to it "
        f"(toolprep connect --data-dir {data_dir}), stop it (kill {address.pid}), or pass "
        "another --data-dir"
    )


def _pid_in_lock_file(path: Path) -> int | None:
    """The pid the holder wrote, if it still runs: in a read-only directory the holder could
    not write its own, and the file still names an earlier daemon."""
    try:
        with path.open("rb") as held:
            text = held.read(_MAX_PID_BYTES).strip()
    except OSError:
        return None
    pid = int(text) if text.isdigit() else 0
    return pid if daemon_running(pid) else None
