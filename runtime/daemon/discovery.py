"""Where a running ``toolprep serve`` says how to reach it: ``serve.json`` in its data directory.

The daemon always requires a token, and a token must never travel on a
command line (``/proc/PID/cmdline`` is readable by every process of the
machine). So, as Jupyter does, the daemon writes its address and token to
a file only its user can read (mode 0600, in a directory created 0700), and
clients of the same user read them there. The file is written to a
temporary name and renamed, so a reader never sees half of it, and it is
removed at a clean exit only if it still names this process: a second
daemon started on the same data directory owns it from then on.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import orjson

from toolprep.runtime.daemon.runs_with import RunsWith

__all__ = [
    "DAEMON_FILE",
    "DaemonAddress",
    "DaemonFileError",
    "daemon_file_path",
    "read_daemon_file",
    "remove_daemon_file",
    "write_daemon_file",
]

DAEMON_FILE: Final = "serve.json"


class DaemonFileError(ValueError):
    """The daemon file is missing, unreadable or not what a daemon writes."""


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


def read_daemon_file(data_dir: Path) -> DaemonAddress:
    """The address the daemon serving from ``data_dir`` wrote; ``DaemonFileError`` if none."""
    path = daemon_file_path(data_dir)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DaemonFileError(f"no daemon file at {path}: is toolprep serve running?") from None
    except OSError as exc:
        raise DaemonFileError(f"cannot read the daemon file {path}: {exc}") from None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise DaemonFileError(f"the daemon file {path} is not JSON: {exc}") from None
    match data:
        case {"url": str(url), "token": str(token), "pid": int(pid)} if url and token:
            return DaemonAddress(url, token, pid, RunsWith.from_json(data.get("runs_with")))
        case _:
            raise DaemonFileError(f"the daemon file {path} does not hold a url, a token and a pid")


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
