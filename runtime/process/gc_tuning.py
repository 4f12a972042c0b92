"""The garbage collector's settings for a long-running agent process.

CPython's default thresholds (700, 10, 10) suit short scripts. In the agent
the stream loop allocates a few small objects per provider event (chunks,
parts, dicts), thousands of times a second under load, so young-generation
passes run constantly; and each full pass walks every object the process
holds, pausing every thread (the stream loop included) for hundreds of
milliseconds once a thousand sessions are open, which shows as late tool
cards.

Two changes, made once at start-up:

- ``gc.freeze()`` moves everything alive by then (imported modules, the
  SDK clients, the actors, the tool registry) into the permanent
  generation, which no later pass scans: it lives as long as the process.
- Higher thresholds: a young pass every ``GEN0_THRESHOLD`` net allocations
  instead of 700, and a full pass only every ``GEN2_THRESHOLD`` middle
  passes. Reference counting still frees almost everything at once; the
  collector is only needed for cycles, which the runtime rarely makes.
"""

from __future__ import annotations

import gc

__all__ = ["GEN0_THRESHOLD", "GEN1_THRESHOLD", "GEN2_THRESHOLD", "tune_gc_for_daemon"]

GEN0_THRESHOLD = 50_000
GEN1_THRESHOLD = 20
GEN2_THRESHOLD = 100


def tune_gc_for_daemon() -> None:
    """Freeze start-up state and raise the thresholds; call after building the runtime."""
    gc.freeze()
    gc.set_threshold(GEN0_THRESHOLD, GEN1_THRESHOLD, GEN2_THRESHOLD)
