"""Sessions on a Ray cluster: shard actors behind the same routing front as worker processes.

Each shard is a Ray actor hosting one whole ``Runtime`` (its own actors,
stream loop and tools) that serves many sessions. The front is the worker
front (``WorkerHost``) with a Ray transport under it: it places sessions on
the least loaded shard, routes calls by session id, relays each shard's
already-serialised frames, and when a shard dies gives its open cards their
discards, answers its running prompts with an error and starts a successor
that reloads the sessions from the store. A detached placement actor records
which shard serves which session, so another front can find them.

Needs the optional ``ray`` extra (``pip install 'toolprep[ray]'``).
"""

import os

# Read once, when ray is first imported: without it Ray's core takes SIGTERM for a crash
# (a stack trace, exit status 15), while for a front it is the request to stop gracefully.
os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")

from toolprep.runtime.ray_host.host import RayHost, connect, forwarded_environment
from toolprep.runtime.ray_host.registry import locate, registry_name

__all__ = ["RayHost", "connect", "forwarded_environment", "locate", "registry_name"]
