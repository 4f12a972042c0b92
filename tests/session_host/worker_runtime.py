"""The runtime each worker process of the conformance suite builds (a ``WorkerSpec`` factory).

It is the in-process harness's runtime, built inside the worker: the same
provider on the loopback fake server, the same tools (the built-ins plus the
recording weather tool) and the same fast retry policy. Given a ``store`` path
in the config it journals there, as the daemon's runtimes do, so that a
successor (a Ray shard replacing a dead one) can reload the sessions.
"""

from __future__ import annotations

from typing import Any

from tests.support.runtime_harness import TRUSTING_ECHO, RecordingTool
from toolprep.runtime.hosting.runtime import Runtime, RuntimeConfig
from toolprep.runtime.kernel.retry import RetryPolicy
from toolprep.runtime.providers.factory import build_provider
from toolprep.runtime.providers.routes import ModelRoute
from toolprep.runtime.store import SessionStore
from toolprep.runtime.tools.registry import default_registry


def build(config: dict[str, Any]) -> Runtime:
    provider = build_provider(
        config["kind"], base_url=config["base_url"], api_key="test-key", max_retries=0
    )
    registry = default_registry()
    registry.register(RecordingTool(), replace=True)
    retry = RetryPolicy(max_retries=2, base_delay=0.01, jitter=0.0, max_delay=0.05)
    store = SessionStore(config["store"]) if "store" in config else None
    return Runtime(
        [ModelRoute(provider, "model-a")],
        registry,
        RuntimeConfig(retry=retry),
        store=store,
        mcp=TRUSTING_ECHO,
    )
