"""The sandbox shell commands and stdio MCP servers run in: bubblewrap, on Linux.

A command the model chose runs with the agent's rights unless something confines
it: it could read ``~/.ssh``, the data directory with the daemon's token
(``serve.json``), the projects of the daemon's other sessions, and reach the network.
So each command (and each stdio MCP server) runs under ``bwrap``:

- the whole system read-only (``--ro-bind / /``), a fresh ``/dev``, a private ``/tmp``;
- the session's directory writable (``--bind cwd cwd``), and nothing else;
- hidden behind an empty ``tmpfs`` (a directory) or ``/dev/null`` (a file): the data
  directory, the directories of the runtime's other sessions (save those that contain
  this one), the usual credential files under ``$HOME``, the user's runtime directory
  (agent sockets, keyrings) and the Docker socket;
- a new PID namespace with its own ``/proc``, so the agent and every other process of
  the machine are out of sight, and when the namespace's first process ends the kernel
  ends every process left in it: a command's background children end with it;
- no network (``--unshare-net``) unless ``--sandbox-network`` allows it;
- ``--die-with-parent`` and ``--new-session`` (no ``TIOCSTI`` into the agent's terminal),
  so killing the process the agent started (the existing group kill) ends the tree;
- resource limits (processes, address space, CPU seconds, file size), set inside the
  sandbox by ``prlimit`` (util-linux) before it executes the command, or, where there is
  no ``prlimit``, by a tiny Python launcher (an interpreter start, some 15 ms, per
  command); never by ``preexec_fn``, which is unsafe in the threaded agent.

Whether a sandbox can be had is probed once per process (``probe``): ``bwrap`` may be
installed while user namespaces are off, so a real run decides.
"""

from __future__ import annotations

import functools
import logging
import os
import resource
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, assert_never

from toolprep.runtime.tools.hidden_paths import CREDENTIAL_PATHS

__all__ = [
    "DEFAULT_LIMITS",
    "SANDBOX_MODES",
    "Sandbox",
    "SandboxLimits",
    "SandboxMode",
    "SandboxStatus",
    "check_sandbox_mode",
    "credential_paths",
    "find_prlimit",
    "parse_limits",
    "probe",
]

logger = logging.getLogger(__name__)

SandboxMode = Literal["auto", "on", "off"]
SANDBOX_MODES: tuple[SandboxMode, ...] = ("auto", "on", "off")

_PROBE_TIMEOUT_S = 30.0


_SYSTEM_SECRETS = ("/var/run/docker.sock", "/run/docker.sock")
"""Sockets that hand out root to whoever can connect."""

_LIMITS_LAUNCHER = (
    "import os, resource, sys\n"
    "for name, value in zip(('NPROC', 'AS', 'CPU', 'FSIZE'), sys.argv[1:5]):\n"
    "    which = getattr(resource, 'RLIMIT_' + name)\n"
    "    soft, hard = resource.getrlimit(which)\n"
    "    value = int(value)\n"
    "    if hard != resource.RLIM_INFINITY:\n"
    "        value = min(value, hard)\n"
    "    resource.setrlimit(which, (value, value))\n"
    "try:\n"
    "    os.execvp(sys.argv[5], sys.argv[5:])\n"
    "except OSError as exc:\n"
    "    sys.exit(f'cannot start {sys.argv[5]!r}: {exc.strerror}')\n"
)
"""Sets the limits on itself and executes the command, which keeps them. Run isolated
(``-I -S``), so nothing of the command's environment chooses what it imports."""

_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """What one sandboxed command (and everything it starts) may use.

    Generous enough for builds (``make -j``, a linker, a JVM reserving address space);
    they stop a fork bomb, a runaway allocation, a spinning process or a file that fills
    the disk. ``processes`` counts the user's processes in the sandbox's user namespace;
    the kernel does not apply it to root.
    """

    processes: int = 4096
    memory_mib: int = 32 * 1024
    """Address space per process (``RLIMIT_AS``), in MiB."""
    cpu_s: int = 3600
    """CPU seconds per process."""
    file_mib: int = 16 * 1024
    """Largest file a process may write, in MiB."""

    def argv(self) -> list[str]:
        """The values, in the launcher's order (``_LIMITS_LAUNCHER``)."""
        return [str(value) for _, value in self._values()]

    def prlimit_argv(self, prlimit: str) -> list[str]:
        """``prlimit`` setting each limit (soft and hard) and executing what follows ``--``.

        Each value is capped at this process's own hard limit, which the command
        inherits and may not raise, as the launcher caps it.
        """
        options: list[str] = []
        for name, value in self._values():
            _, hard = resource.getrlimit(getattr(resource, f"RLIMIT_{name}"))
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            options.append(f"--{_PRLIMIT_OPTIONS[name]}={value}")
        return [prlimit, *options, "--"]

    def _values(self) -> list[tuple[str, int]]:
        return [
            ("NPROC", self.processes),
            ("AS", self.memory_mib * _MIB),
            ("CPU", self.cpu_s),
            ("FSIZE", self.file_mib * _MIB),
        ]


_PRLIMIT_OPTIONS = {"NPROC": "nproc", "AS": "as", "CPU": "cpu", "FSIZE": "fsize"}


DEFAULT_LIMITS = SandboxLimits()

_LIMIT_NAMES = {
    "processes": "processes",
    "memory": "memory_mib",
    "cpu": "cpu_s",
    "file": "file_mib",
}


def parse_limits(entries: Iterable[str]) -> SandboxLimits:
    """``--sandbox-limit`` entries (``processes=N``, ``memory=MiB``, ``cpu=SECONDS``,
    ``file=MiB``) over the defaults; ``ValueError`` for anything else."""
    values: dict[str, int] = {}
    for entry in entries:
        name, sep, raw = entry.partition("=")
        field_name = _LIMIT_NAMES.get(name.strip())
        if not sep or field_name is None:
            raise ValueError(
                f"--sandbox-limit takes NAME=VALUE with NAME one of "
                f"{', '.join(_LIMIT_NAMES)}; got {entry!r}"
            )
        try:
            value = int(raw)
        except ValueError:
            value = 0
        if value < 1:
            raise ValueError(f"--sandbox-limit {name} must be a whole number >= 1, got {raw!r}")
        values[field_name] = value
    return SandboxLimits(**values)


def check_sandbox_mode(mode: str) -> SandboxMode:
    match mode:
        case "auto" | "on" | "off":
            return mode
        case _:
            raise ValueError(f"--sandbox must be one of auto, on, off; got {mode!r}")


SandboxState = Literal["on", "off", "unavailable"]


@dataclass(frozen=True, slots=True)
class SandboxStatus:
    """Whether commands run sandboxed, and why not when they do not."""

    state: SandboxState
    reason: str = ""
    network: bool = False
    bwrap: str | None = None

    def to_meta(self) -> dict[str, object]:
        """What ``initialize`` tells the client under ``_meta.toolprep.sandbox``."""
        meta: dict[str, object] = {"state": self.state, "network": self.network}
        if self.reason:
            meta["reason"] = self.reason
        return meta

    def notice(self) -> str | None:
        """The session notice when commands run unconfined though a sandbox was wanted."""
        match self.state:
            case "unavailable":
                return (
                    f"No sandbox: shell commands and MCP servers run with the agent's full "
                    f"rights ({self.reason}). Install bubblewrap (bwrap) to confine them."
                )
            case "on" | "off":
                return None
            case _:
                assert_never(self.state)


_probed: dict[str, SandboxStatus] = {}
_probe_lock = threading.Lock()


def probe(bwrap: str = "bwrap") -> SandboxStatus:
    """Whether ``bwrap`` runs a process as the sandbox would here (probed once per name)."""
    with _probe_lock:
        known = _probed.get(bwrap)
        if known is None:
            known = _probed[bwrap] = _probe(bwrap)
        return known


def _probe(bwrap: str) -> SandboxStatus:
    if not sys.platform.startswith("linux"):
        return SandboxStatus("unavailable", f"no sandbox is implemented for {sys.platform}")
    found = shutil.which(bwrap)
    if found is None:
        return SandboxStatus("unavailable", f"{bwrap} (bubblewrap) is not on PATH")
    argv = [
        found,
        *_namespaces(network=False),
        *_system_view(),
        "--",
        sys.executable,
        "-I",
        "-S",
        "-c",
        "pass",
    ]
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=_PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return SandboxStatus("unavailable", f"{found} could not be run: {exc}")
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        why = said[-1] if said else f"exit code {done.returncode}"
        return SandboxStatus(
            "unavailable", f"{found} cannot create a sandbox here ({why}): are user namespaces off?"
        )
    return SandboxStatus("on", bwrap=found)


def _namespaces(*, network: bool) -> list[str]:
    flags = [
        "--die-with-parent",
        "--new-session",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
    ]
    if not network:
        flags.append("--unshare-net")
    return flags


def find_prlimit() -> str | None:
    """util-linux's ``prlimit``, if it is on ``PATH`` in a system directory the sandbox
    shows read-only (not one the session could change, nor the hidden ``/tmp``)."""
    found = shutil.which("prlimit")
    if found is None:
        return None
    real = os.path.realpath(found)
    return real if real.startswith(("/usr/", "/bin/", "/sbin/")) else None


def credential_paths(home: Path, environ: Mapping[str, str]) -> list[Path]:
    """The credential files a command must not see: under ``home``, the user's runtime
    directory, the SSH agent's socket, the Docker socket."""
    paths = [home / name for name in CREDENTIAL_PATHS]
    for variable in ("XDG_RUNTIME_DIR", "SSH_AUTH_SOCK"):
        value = environ.get(variable)
        if value and os.path.isabs(value):
            paths.append(Path(value))
    paths.extend(Path(path) for path in _SYSTEM_SECRETS)
    return paths


def agent_installation() -> list[str]:
    """Where this agent's interpreter and code live: a sandboxed command or MCP server
    may run them (``sys.executable -m ...``), and the limits launcher does."""
    code_root = Path(__file__).resolve().parents[2]  # the folder holding ``runtime/``
    places = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(code_root)}
    places.add(os.path.dirname(os.path.realpath(sys.executable)))
    return sorted({os.path.realpath(place) for place in places})


@functools.cache
def installation_in_tmp() -> tuple[str, ...]:
    """The parts of ``agent_installation`` inside ``/tmp`` (a checkout or a virtualenv
    there), outermost only: the sandbox's private ``/tmp`` would hide them, so it shows
    them read-only. Elsewhere the read-only root shows them already. Computed once: the
    installation does not move."""
    kept: list[str] = []
    for place in agent_installation():  # sorted: a folder comes before what lies in it
        inside_tmp = _within(place, "/tmp") and place != "/tmp"
        if inside_tmp and os.path.isdir(place) and not any(_within(place, k) for k in kept):
            kept.append(place)
    return tuple(kept)


def _system_view() -> list[str]:
    """What every sandbox (the probe's too) sees before its own binds: the system
    read-only, its own ``/dev`` and ``/proc``, a private ``/tmp`` showing the agent's
    installation if that lies in it."""
    return [
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        *_shown_in_tmp(),
    ]


def _shown_in_tmp() -> list[str]:
    return [arg for place in installation_in_tmp() for arg in ("--ro-bind", place, place)]


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


@dataclass(slots=True)
class Sandbox:
    """Builds the ``bwrap`` command line for a command of a session.

    ``hidden`` are fixed paths to hide (the data directory, credentials);
    ``session_directories`` (set once the runtime exists) names the directories of the
    sessions the runtime knows, whose other members are hidden from each session.
    ``prlimit`` sets the limits if given (``find_prlimit``), else a Python launcher does.
    """

    bwrap: str
    network: bool = False
    limits: SandboxLimits = DEFAULT_LIMITS
    hidden: tuple[Path, ...] = ()
    session_directories: Callable[[], Iterable[str]] | None = field(default=None)
    prlimit: str | None = None

    def wrap(self, argv: Sequence[str], *, cwd: str) -> list[str]:
        """``argv`` to run in ``cwd`` under the sandbox (started like ``argv`` would be)."""
        here = os.path.realpath(cwd)
        outside: list[str] = []
        inside: list[str] = []
        for path in self._hidden_paths(here):
            mount = _hide(path)
            if mount is None:
                continue
            (inside if _within(path, here) else outside).extend(mount)
        return [
            self.bwrap,
            *_namespaces(network=self.network),
            *_system_view(),
            *outside,
            "--bind",
            here,
            here,
            *inside,
            "--chdir",
            here,
            "--",
            *self._limited(argv),
        ]

    def _limited(self, argv: Sequence[str]) -> list[str]:
        """``argv`` behind what sets the limits on it."""
        if self.prlimit is not None:
            return [*self.limits.prlimit_argv(self.prlimit), *argv]
        return [sys.executable, "-I", "-S", "-c", _LIMITS_LAUNCHER, *self.limits.argv(), *argv]

    def _hidden_paths(self, here: str) -> list[str]:
        """Existing paths to hide from a command in ``here``, deduplicated, shortest first;
        never one that contains ``here`` (that would hide the session's own directory),
        nor one the private ``/tmp`` hides already (``_unseen_anyway``)."""
        wanted: list[str] = [str(path) for path in self.hidden]
        if self.session_directories is not None:
            try:
                wanted.extend(self.session_directories())
            except Exception:  # a store that cannot be read must not stop the command
                logger.exception("the sandbox could not list the other sessions' directories")
        found: set[str] = set()
        for raw in wanted:
            path = os.path.realpath(raw)
            if _within(here, path) or _unseen_anyway(path, here):
                continue
            if os.path.lexists(path):
                found.add(path)
        kept: list[str] = []
        for path in sorted(found, key=lambda p: (p.count("/"), p)):
            if not any(_within(path, outer) for outer in kept):
                kept.append(path)
        return kept


def _unseen_anyway(path: str, here: str) -> bool:
    """Whether the private ``/tmp`` hides ``path`` already: in ``/tmp``, and neither in
    the session's directory nor in the agent's installation shown there."""
    if not _within(path, "/tmp") or _within(path, here):
        return False
    return not any(_within(path, place) for place in installation_in_tmp())


def _hide(path: str) -> list[str] | None:
    """The bwrap arguments that hide ``path``: an empty tmpfs over a directory, the
    null device over anything else (a file, a socket)."""
    if os.path.isdir(path):
        return ["--tmpfs", path]
    if os.path.exists(path):
        return ["--ro-bind", "/dev/null", path]
    return None
