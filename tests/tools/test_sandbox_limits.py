"""Both ways of setting a sandboxed command's limits set the same limits.

``prlimit`` (util-linux) sets them where it is installed; a Python launcher does
elsewhere. Each wraps ``cat /proc/self/limits`` under the real ``bwrap``, which so reports
the limits it runs under; each must be what ``--sandbox-limit`` asked for.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from toolprep.runtime.tools.sandbox import Sandbox, SandboxLimits, find_prlimit, probe

LIMITS = SandboxLimits(processes=777, memory_mib=3000, cpu_s=123, file_mib=5)
EXPECTED = {
    "Max processes": "777",
    "Max address space": str(3000 * 1024 * 1024),
    "Max cpu time": "123",
    "Max file size": str(5 * 1024 * 1024),
}


def _limits_of(table: str) -> dict[str, tuple[str, str]]:
    """``/proc/<pid>/limits``: each limit's soft and hard value, by its name."""
    found: dict[str, tuple[str, str]] = {}
    for line in table.splitlines()[1:]:
        name = line[:26].strip()
        soft, hard = line[26:].split()[:2]
        found[name] = (soft, hard)
    return found


@pytest.mark.parametrize("setter", ["prlimit", "launcher"])
def test_the_limits_asked_for_are_the_limits_a_command_gets(setter: str, tmp_path: Path) -> None:
    status = probe()
    assert status.state == "on" and status.bwrap is not None, status.reason
    prlimit = find_prlimit() if setter == "prlimit" else None
    assert (prlimit is None) == (setter == "launcher"), "util-linux's prlimit is missing"
    sandbox = Sandbox(status.bwrap, limits=LIMITS, prlimit=prlimit)
    argv = sandbox.wrap(["/bin/cat", "/proc/self/limits"], cwd=str(tmp_path))
    assert (prlimit in argv) if prlimit else ("-I" in argv)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    limits = _limits_of(done.stdout)
    assert {name: limits[name] for name in EXPECTED} == {
        name: (value, value) for name, value in EXPECTED.items()
    }
