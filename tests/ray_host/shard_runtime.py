"""The runtime each shard actor of the Ray tests builds (a ``WorkerSpec`` factory).

The conformance suite's worker runtime (loopback provider, built-in tools
plus the recording weather tool, fast retries), journalling into the store
named in the config as the daemon's runtimes do, so that a successor shard
can reload a dead one's sessions.
"""

from __future__ import annotations

from typing import Any

from tests.support.runtime_harness import RecordingTool
from toolprep.actors.stream_reader import ModelRoute
from toolprep.runtime.host import Runtime, RuntimeConfig
from toolprep.runtime.providers.factory import build_provider
from toolprep.runtime.retry import RetryPolicy
from toolprep.runtime.store import SessionStore
from toolprep.runtime.tools.registry import default_registry


def build(config: dict[str, Any]) -> Runtime:
    provider = build_provider(
        config["kind"], base_url=config["base_url"], api_key="test-key", max_retries=0
    )
    registry = default_registry()
    registry.register(RecordingTool(), replace=True)
    retry = RetryPolicy(max_retries=2, base_delay=0.01, jitter=0.0, max_delay=0.05)
    store = SessionStore(config["store"])
    return Runtime(
        [ModelRoute(provider, "model-a")], registry, RuntimeConfig(retry=retry), store=store
    )
