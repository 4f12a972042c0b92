"""Sessions spread over worker processes behind a thin routing front.

Each worker is a whole ``Runtime`` (its own actors, stream loop and timer) in
its own process, so sessions use every core. The front (``WorkerHost``) is a
``SessionHost`` like the in-process runtime: it routes calls by session id
and relays each worker's frames, already serialised, to the sessions' sinks.
"""

from toolprep.runtime.workers.backoff import RestartBackoff
from toolprep.runtime.workers.process import WorkerSpec, default_worker_count
from toolprep.runtime.workers.worker_host import WorkerCrashed, WorkerHost

__all__ = ["RestartBackoff", "WorkerCrashed", "WorkerHost", "WorkerSpec", "default_worker_count"]
