"""Where a running ``toolprep serve`` says how to reach it: ``serve.json`` in its data directory.

The daemon always requires a token, and a token must never travel on a
command line (``/proc/PID/cmdline`` is readable by every process of the
machine). So, as Jupyter does, the daemon writes its address and token to
a file only its user can read (mode 0600, in a directory created 0700), and
clients of the same user read them there. The file is written to a
temporary name and renamed, so a reader never sees half of it, and it is
removed at a clean exit only if it still names this process: a second
daemon started on the same data directory owns it from then on.

A client trusts the file only as far as nobody else could have written it
(``read_trusted_daemon_file``): the file and its directory must be owned by
this user and writable by nobody else, and it must be a small regular file.
Anything else is refused with one line (``DaemonFileUntrusted``) before a
byte is read: a file planted in a world-writable ``--data-dir`` would hand
the connection to whoever planted it, a FIFO would hang the reader, and a
link to ``/dev/zero`` would fill its memory. It is opened with
``O_NOFOLLOW | O_NONBLOCK`` after an ``lstat`` (so neither a link nor a FIFO
is followed or waited on), checked again on the descriptor, and read
bounded. Whether the daemon it names is still there is ``connect``'s
question; a stale file is removed with ``remove_stale_daemon_file``, only if
it is still the very file that was read.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import orjson

from toolprep.runtime.daemon.runs_with import RunsWith

__all__ = [
    "DAEMON_FILE",
    "MAX_DAEMON_FILE_BYTES",
    "DaemonAddress",
    "DaemonFile",
    "DaemonFileError",
    "DaemonFileMissing",
    "DaemonFileUntrusted",
    "daemon_file_path",
    "read_daemon_file",
    "read_trusted_daemon_file",
    "remove_daemon_file",
    "remove_stale_daemon_file",
    "write_daemon_file",
]

DAEMON_FILE: Final = "serve.json"
MAX_DAEMON_FILE_BYTES: Final = 64 * 1024
"""A daemon writes well under 1 KiB; anything larger is not its file."""


class DaemonFileError(ValueError):
    """The daemon file is missing, unreadable or not what a daemon writes."""


class DaemonFileMissing(DaemonFileError):
    """There is no daemon file (nor, perhaps, its directory): no daemon announced itself."""


class DaemonFileUntrusted(DaemonFileError):
    """The daemon file, or its directory, is not one only this user could have written, or
    not a small regular file: it is neither used nor replaced, the user decides."""


@dataclass(frozen=True, slots=True)
class DaemonAddress:
    """How to reach a running daemon: its ``ws://`` URL, its bearer token, its process id;
    and what its sessions stream from (None in a daemon file of an older toolprep)."""

    url: str
    token: str
    pid: int
    runs_with: RunsWith | None = None


def daemon_file_path(data_dir: Path) -> Path:
    return data_dir / DAEMON_FILE


def write_daemon_file(data_dir: Path, address: DaemonAddress) -> Path:
    """Write ``address`` to ``serve.json`` in ``data_dir`` (created 0700 if missing), mode 0600.

    The temporary file is created with ``O_EXCL`` (so never through a
    planted file or link) and renamed over the old one in one step.
    """
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = daemon_file_path(data_dir)
    temporary = data_dir / f".{DAEMON_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
    written: dict[str, object] = {"url": address.url, "token": address.token, "pid": address.pid}
    if address.runs_with is not None:
        written["runs_with"] = address.runs_with.to_json()
    body = orjson.dumps(written)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(body + b"\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    return path


@dataclass(frozen=True, slots=True)
class DaemonFile:
    """A daemon file read and trusted: what it says, and which file it was (device, inode)."""

    address: DaemonAddress
    path: Path
    identity: tuple[int, int]


def read_daemon_file(data_dir: Path) -> DaemonAddress:
    """The address the daemon serving from ``data_dir`` wrote; ``DaemonFileError`` if none,
    or if it is not to be trusted (``read_trusted_daemon_file``)."""
    return read_trusted_daemon_file(data_dir).address


def read_trusted_daemon_file(data_dir: Path) -> DaemonFile:
    """The daemon file of ``data_dir``, checked (see the module's docstring) and parsed.

    ``DaemonFileMissing`` if there is none, ``DaemonFileUntrusted`` if it or its directory
    could have been written by someone else or is not a small regular file,
    ``DaemonFileError`` if it is unreadable or not what a daemon writes.
    """
    path = daemon_file_path(data_dir)
    try:
        directory = os.open(data_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise DaemonFileMissing(f"no daemon file at {path}: is toolprep serve running?") from None
    except OSError as exc:
        raise DaemonFileError(f"cannot open the data directory {data_dir}: {exc}") from None
    try:
        _check_directory(data_dir, os.fstat(directory))
        raw, identity = _read_checked(path, directory)
    finally:
        os.close(directory)
    return DaemonFile(_parsed(path, raw), path, identity)


def _check_directory(data_dir: Path, info: os.stat_result) -> None:
    if info.st_uid != os.geteuid():
        raise DaemonFileUntrusted(
            f"the data directory {data_dir} belongs to uid {info.st_uid}, not to this user "
            f"(uid {os.geteuid()}): its serve.json cannot be trusted; use a --data-dir of your own"
        )
    if info.st_mode & 0o022:
        raise DaemonFileUntrusted(
            f"the data directory {data_dir} is writable by other users "
            f"(mode {stat.S_IMODE(info.st_mode):04o}): anyone could have planted its serve.json; "
            f"make it yours alone (chmod 700 {data_dir}) or use another --data-dir"
        )


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _check_file(path: Path, info: os.stat_result) -> None:
    remedy = f"remove it (rm {path}) and start the daemon again"
    if not stat.S_ISREG(info.st_mode):
        raise DaemonFileUntrusted(
            f"{path} is {_kind(info.st_mode)}, not the file toolprep serve writes: {remedy}"
        )
    if info.st_uid != os.geteuid():
        raise DaemonFileUntrusted(
            f"{path} belongs to uid {info.st_uid}, not to this user (uid {os.geteuid()}): "
            f"someone else wrote it; {remedy}"
        )
    if info.st_mode & 0o022:
        raise DaemonFileUntrusted(
            f"{path} is writable by other users (mode {stat.S_IMODE(info.st_mode):04o}): "
            f"anyone could have changed it; {remedy}"
        )
    if info.st_size > MAX_DAEMON_FILE_BYTES:
        raise DaemonFileUntrusted(
            f"{path} holds {info.st_size} bytes, more than a daemon file's "
            f"{MAX_DAEMON_FILE_BYTES}: it is not one; {remedy}"
        )


def _read_checked(path: Path, directory: int) -> tuple[bytes, tuple[int, int]]:
    """The file's bytes and identity: looked at without following it, opened without
    following or waiting, looked at again on the descriptor, read bounded."""
    try:
        seen = os.stat(DAEMON_FILE, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        raise DaemonFileMissing(f"no daemon file at {path}: is toolprep serve running?") from None
    except OSError as exc:
        raise DaemonFileError(f"cannot read the daemon file {path}: {exc}") from None
    _check_file(path, seen)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    try:
        fd = os.open(DAEMON_FILE, flags, dir_fd=directory)
    except FileNotFoundError:
        raise DaemonFileMissing(f"no daemon file at {path}: is toolprep serve running?") from None
    except OSError as exc:
        raise DaemonFileError(f"cannot read the daemon file {path}: {exc}") from None
    try:
        info = os.fstat(fd)
        _check_file(path, info)
        chunks: list[bytes] = []
        left = MAX_DAEMON_FILE_BYTES + 1
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise DaemonFileError(f"cannot read the daemon file {path}: {exc}") from None
    finally:
        os.close(fd)
    raw = b"".join(chunks)
    if len(raw) > MAX_DAEMON_FILE_BYTES:  # grew since the fstat
        raise DaemonFileUntrusted(
            f"{path} holds more than a daemon file's {MAX_DAEMON_FILE_BYTES} bytes: it is not "
            f"one; remove it (rm {path}) and start the daemon again"
        )
    return raw, (info.st_dev, info.st_ino)


def _parsed(path: Path, raw: bytes) -> DaemonAddress:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise DaemonFileError(f"the daemon file {path} is not JSON: {exc}") from None
    match data:
        case {"url": str(url), "token": str(token), "pid": int(pid)} if url and token:
            return DaemonAddress(url, token, pid, RunsWith.from_json(data.get("runs_with")))
        case _:
            raise DaemonFileError(f"the daemon file {path} does not hold a url, a token and a pid")


def remove_stale_daemon_file(found: DaemonFile) -> bool:
    """Remove the file ``found`` was read from, if it is still that file (a daemon started
    since may have replaced it with its own); True if it was removed.

    The directory is this user's alone (``_check_directory``), so only this user's own
    processes could swap the file between the check and the removal.
    """
    try:
        now = os.stat(found.path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if (now.st_dev, now.st_ino) != found.identity:
        return False
    with contextlib.suppress(FileNotFoundError):
        found.path.unlink()
    return True


def remove_daemon_file(data_dir: Path, pid: int) -> bool:
    """Remove the daemon file if it still names process ``pid``; True if it was removed."""
    try:
        owner = read_daemon_file(data_dir).pid
    except DaemonFileError:
        return False
    if owner != pid:
        return False
    with contextlib.suppress(FileNotFoundError):
        daemon_file_path(data_dir).unlink()
    return True
