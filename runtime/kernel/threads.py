"""Thread pools whose threads all exist from the start.

``ThreadPoolExecutor`` starts workers lazily, so a process serving 1 session
has fewer threads than one serving 1000 although both are bounded by the
same limit. Starting every worker up front makes the thread count a
constant of the configuration, which is what an operator of a long-running
daemon can plan for and what the load benchmark checks.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor


def prestarted_pool(workers: int, name: str) -> ThreadPoolExecutor:
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
    barrier = threading.Barrier(workers + 1)
    for _ in range(workers):
        pool.submit(barrier.wait, 5.0)  # each worker is busy until all exist
    barrier.wait(5.0)
    return pool
