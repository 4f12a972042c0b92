"""The agent's start-up allocator tuning, checked in fresh interpreters (it changes process state).

glibc counts the blocks it serves with ``mmap`` (``mallinfo2().hblks``); a
block allocated and freed at once shows whether an allocation of that size
maps memory. asyncio's 256 KiB read buffer is the size that matters. The
agent runs on Linux with glibc, the only allocator the tuning touches.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from toolprep.runtime.process.malloc_tuning import MMAP_THRESHOLD_BYTES

_ASYNCIO_READ_BYTES = 256 * 1024

_PROBE = textwrap.dedent(
    """
    import ctypes, json, sys
    from toolprep.runtime.process.tuning import tune_process_for_daemon

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2

    def maps(size):
        before = libc.mallinfo2().hblks
        block = bytearray(size)
        mapped = libc.mallinfo2().hblks - before
        del block
        return mapped > 0

    sizes = [int(arg) for arg in sys.argv[1:]]
    before = [maps(size) for size in sizes]
    tuned = tune_process_for_daemon()
    after = [maps(size) for size in sizes]
    print(json.dumps({"tuned": tuned, "before": before, "after": after}))
    """
)


def _probe(sizes: list[int], env: dict[str, str]) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, *map(str, sizes)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=env,
    )
    probe: dict[str, object] = json.loads(result.stdout)
    return probe


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}


def test_after_tuning_a_socket_read_buffer_no_longer_maps_memory() -> None:
    far_above = 8 * MMAP_THRESHOLD_BYTES
    probe = _probe([_ASYNCIO_READ_BYTES, far_above], _clean_env())
    assert probe["tuned"] is True
    # glibc's default threshold (128 KiB) maps the read buffer...
    assert probe["before"] == [True, True]
    # ...the tuned one serves it from the heap; blocks far above still map.
    assert probe["after"] == [False, True]


def test_an_operators_malloc_settings_are_left_alone() -> None:
    env = {**_clean_env(), "MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}
    probe = _probe([_ASYNCIO_READ_BYTES], env)
    assert probe["tuned"] is False
    assert probe["after"] == [True]
