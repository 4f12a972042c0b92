"""glibc's allocator settings for a long-running agent process.

asyncio reads a socket with ``recv(256 KiB)``: Python allocates a bytes
object of the full 256 KiB, the kernel fills the few hundred bytes a
provider event takes, and the object is shrunk to that size. glibc serves
any block above its mmap threshold (128 KiB by default) with a fresh
``mmap``, so every read of every provider stream can map, fault in and
unmap pages: 12-16 us per read on a 2-core machine, more than the
``recv`` itself (``benchmarks/read_floor.py``, last at 7897dd9). glibc raises its threshold by
itself only once some block that large is freed whole, which the shrunk
read buffers never are; so whether a process pays depends on what else it
happened to allocate, and the agent paid under load.

Two settings, made once at start-up, keep those blocks in the heap:

- ``M_MMAP_THRESHOLD`` at ``MMAP_THRESHOLD_BYTES``: blocks below it come
  from the heap, which reuses the same memory read after read;
- ``M_TRIM_THRESHOLD`` at ``TRIM_THRESHOLD_BYTES``: the heap keeps up to that
  much free memory at its top instead of handing it back to the kernel and
  faulting it in again on the next read.

The cost is memory the process keeps instead of returning: at most the trim
threshold per heap. ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_``
in the environment are the operator's own choice and are left alone, as is
any C library other than glibc.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Final

__all__ = ["MMAP_THRESHOLD_BYTES", "TRIM_THRESHOLD_BYTES", "tune_malloc_for_daemon"]

MMAP_THRESHOLD_BYTES: Final = 1024 * 1024
"""Four times asyncio's read size, so a read never maps memory."""

TRIM_THRESHOLD_BYTES: Final = 2 * MMAP_THRESHOLD_BYTES
"""Twice the mmap threshold: the ratio glibc's own sliding thresholds keep."""

_M_TRIM_THRESHOLD: Final = -1
_M_MMAP_THRESHOLD: Final = -3
_OPERATOR_SETTINGS: Final = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def tune_malloc_for_daemon() -> bool:
    """Raise glibc's mmap and trim thresholds; False where that is not ours to do."""
    if not sys.platform.startswith("linux") or any(
        name in os.environ for name in _OPERATOR_SETTINGS
    ):
        return False
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return False
    mallopt = libc.mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success. The trim threshold goes first: setting the
    # mmap threshold alone would leave trimming at glibc's 128 KiB default.
    return bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
        and mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    )
