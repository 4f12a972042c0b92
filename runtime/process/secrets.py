"""Keep this process's secrets out of reach of the processes it starts.

A shell command or an MCP server runs as the agent's user, so without more it
can read ``/proc/<agent>/environ`` (the environment the agent was started
with) and ``/proc/<agent>/cmdline``, encode what it finds, and hand it to the
model: masking the output sees only the encoded copy. Each agent process
(``acp``, ``serve``, ``connect`` and every worker) therefore calls
``protect_process`` first thing:

- ``make_undumpable``: ``prctl(PR_SET_DUMPABLE, 0)``. The kernel then lets no
  other process of the same user read this one's ``/proc/<pid>/environ``,
  ``/proc/<pid>/mem`` or attach to it with ptrace. A process holding
  ``CAP_SYS_PTRACE`` (root) still can, which is why the next step is needed too.
- ``withdraw_secrets``: every variable the tools' ``EnvironmentPolicy`` would keep
  from a tool (by its name, by a password in a URL, by a ``--scrub-env``
  entry) is removed from the C environment (``unsetenv``) and its value is
  overwritten in the original environment block. That block, between
  ``env_start`` and ``env_end`` of ``/proc/self/stat``, is what
  ``/proc/<pid>/environ`` shows: ``unsetenv`` only drops the pointer to it,
  so without overwriting the bytes a root child would still read the key there.
  Overwriting in place was chosen over re-executing with a clean environment
  (and the secrets on a pipe): it costs no second interpreter start on every
  launch, and the bytes are gone before any thread or tool runs.

Python's own ``os.environ`` mapping keeps the values: it is a copy on the
heap, read only by this process (the provider SDKs, the proxy settings, the
tool environment policy, which hands a tool what ``--pass-env`` allows), and
the heap is what ``make_undumpable`` protects. A worker gets the secrets from
its front over its command pipe, never in its environment or command line
(``runtime/workers/process.py``).

The block is only found and overwritten on Linux; elsewhere the variables are
still unset (so a child started without an explicit environment inherits none
of them), and the process is as readable as its platform makes it.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from collections.abc import Iterable, Mapping

from toolprep.runtime.tools.environment import EnvironmentPolicy

logger = logging.getLogger(__name__)

__all__ = [
    "blot_command_line",
    "hold_secret",
    "make_undumpable",
    "protect_process",
    "secret_variables",
    "withdraw_secrets",
    "withdrawn_names",
]

_PR_SET_DUMPABLE = 4
# Fields 48 to 51 of /proc/<pid>/stat (proc(5)); counted from field 3, after the name.
_ARG_START, _ARG_END, _ENV_START, _ENV_END = 45, 46, 47, 48


_withdrawn: set[str] = set()
"""The names ``withdraw_secrets`` took out of this process's C environment."""


def withdrawn_names() -> frozenset[str]:
    """The variables this process withdrew at start (``withdraw_secrets``), so that what it
    hands a child (a worker) leaves them out too."""
    return frozenset(_withdrawn)


def make_undumpable() -> bool:
    """``prctl(PR_SET_DUMPABLE, 0)`` on Linux; False where it is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    except (OSError, AttributeError) as exc:
        logger.warning("cannot make this process undumpable: %s", exc)
        return False
    return True


def secret_variables(environ: Mapping[str, str], *, scrubbed: Iterable[str] = ()) -> dict[str, str]:
    """The variables of ``environ`` no tool may inherit whatever ``--pass-env`` says of
    them later: named like a secret, holding a URL with a password, named by
    ``scrubbed``, or holding the value of one of those under another name."""
    policy = EnvironmentPolicy.for_agent(configured_key=None, names=scrubbed, environ=environ)
    return {name: value for name, value in environ.items() if policy.removes(name, value)}


def _memory_region(first: int, last: int) -> tuple[int, int] | None:
    """Start and end address of a region named by fields of ``/proc/self/stat``."""
    try:
        with open("/proc/self/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[first]), int(fields[last])
    except (OSError, IndexError, ValueError):
        return None
    return (start, end) if 0 < start < end else None


def _overwrite(
    region: tuple[int, int] | None, needles: Iterable[bytes], fill: int, *, keep: int = 0
) -> int:
    """Overwrite every occurrence of each needle inside ``region`` with ``fill``, all but
    its first ``keep`` bytes; the number of occurrences."""
    if region is None:
        return 0
    start, end = region
    block = ctypes.string_at(start, end - start)
    count = 0
    for needle in needles:
        if len(needle) <= keep:
            continue
        at = block.find(needle)
        while at >= 0:
            ctypes.memset(start + at + keep, fill, len(needle) - keep)
            count += 1
            at = block.find(needle, at + len(needle))
    return count


def withdraw_secrets(
    environ: Mapping[str, str] | None = None,
    *,
    scrubbed: Iterable[str] = (),
    kept: Iterable[str] = (),
) -> dict[str, str]:
    """Unset the secret variables (``secret_variables``) in the C environment and overwrite
    their values in the original environment block with NULs (``NAME=`` stays, so the
    block still shows what was withdrawn); ``os.environ`` keeps them. Returns them.

    ``kept`` names secrets a library in this process reads from the C environment
    (``getenv`` in native code, which never sees ``os.environ``): they stay, guarded by
    ``make_undumpable`` alone; tools still never inherit them."""
    environ = os.environ if environ is None else environ
    left = frozenset(kept)
    secrets = {
        name: value
        for name, value in secret_variables(environ, scrubbed=scrubbed).items()
        if name not in left
    }
    for name in secrets:
        os.unsetenv(name)
    _withdrawn.update(secrets)
    if sys.platform.startswith("linux"):
        region = _memory_region(_ENV_START, _ENV_END)
        for name, value in secrets.items():
            entry = os.fsencode(name) + b"=" + os.fsencode(value) + b"\0"
            _overwrite(region, [entry], 0, keep=len(os.fsencode(name)) + 1)
    return secrets


def hold_secret(name: str, value: str) -> None:
    """Put ``value`` in ``os.environ`` for this process's own readers (and the tools'
    environment policy), but not in the C environment a child inherits by default."""
    os.environ[name] = value
    os.unsetenv(name)
    _withdrawn.add(name)


def blot_command_line(secrets: Iterable[str]) -> int:
    """Overwrite each of ``secrets`` in this process's original command line (what
    ``/proc/<pid>/cmdline`` and ``ps`` show) with ``*``; ``sys.argv`` keeps them.
    Linux only; the number of copies overwritten."""
    if not sys.platform.startswith("linux"):
        return 0
    return _overwrite(
        _memory_region(_ARG_START, _ARG_END), [s.encode() for s in secrets if s], ord("*")
    )


def protect_process(
    *,
    scrubbed: Iterable[str] = (),
    command_line: Iterable[str] = (),
    kept: Iterable[str] = (),
) -> None:
    """``make_undumpable``, ``withdraw_secrets`` and ``blot_command_line``: what every
    agent process does before it starts anything."""
    make_undumpable()
    withdraw_secrets(scrubbed=scrubbed, kept=kept)
    blot_command_line(command_line)
