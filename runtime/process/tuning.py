"""One start-up call for every long-running agent process: the CLI, a worker, a Ray shard.

Each setting is process-wide, so it is made where the process starts
serving (the runtime built, nothing read yet) and never by the runtime
itself: an application that embeds a ``Runtime`` keeps its own settings
unless it calls this too.
"""

from __future__ import annotations

from toolprep.runtime.process.gc_tuning import tune_gc_for_daemon
from toolprep.runtime.process.malloc_tuning import tune_malloc_for_daemon

__all__ = ["tune_process_for_daemon"]


def tune_process_for_daemon() -> bool:
    """Apply the allocator and garbage-collector settings; call once the runtime is built.

    Returns whether the allocator settings took (``tune_malloc_for_daemon``);
    the garbage collector's always do.
    """
    malloc_tuned = tune_malloc_for_daemon()
    tune_gc_for_daemon()
    return malloc_tuned
