"""The options that shape a runtime, as one frozen value.

Built once from the command line (``from_arguments``), checked there, and handed to
``assembly`` to build the runtime in this process; for a worker process or a Ray shard the
same value crosses as JSON (``workers.codec.dump_options`` / ``load_options``), so every
process that serves sessions builds its runtime from exactly what the user gave.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, replace

from toolprep.runtime.kernel.compaction import DEFAULT_COMPACT_AT
from toolprep.runtime.kernel.retry import DEFAULT_MAX_RETRY_WAIT
from toolprep.runtime.mcp.config import DEFAULT_CALL_TIMEOUT_S, DEFAULT_MAX_TOOLS
from toolprep.runtime.mcp.policy import McpPolicy
from toolprep.runtime.providers.sse import DEFAULT_MAX_EVENT_BYTES
from toolprep.runtime.store.connection import DEFAULT_SYNCHRONOUS, Synchronous

__all__ = ["RuntimeOptions"]


@dataclass(frozen=True, slots=True)
class RuntimeOptions:
    """The ``toolprep acp`` / ``serve`` options a runtime is built from; each field is the
    option of that name (``fallback_model`` is ``--fallback-model``, repeated)."""

    provider: str | None = None
    model: str | None = None
    fallback_model: tuple[str, ...] = ()
    base_url: str | None = None
    max_retries: int = 3
    max_retry_wait: float = DEFAULT_MAX_RETRY_WAIT
    max_sse_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    context_window: int | None = None
    compact_at: float = DEFAULT_COMPACT_AT
    replay: str | None = None
    allow_shell: bool = False
    mode: str | None = None
    scrub_env: tuple[str, ...] = ()
    pass_env: tuple[str, ...] = ()
    mcp_call_timeout: float | None = DEFAULT_CALL_TIMEOUT_S
    max_mcp_tools: int | None = DEFAULT_MAX_TOOLS
    trust_mcp_server: tuple[str, ...] = ()
    sandbox: str = "auto"
    sandbox_network: bool = False
    sandbox_limit: tuple[str, ...] = ()
    log_level: str = "WARNING"
    data_dir: str | None = None
    synchronous: Synchronous = DEFAULT_SYNCHRONOUS
    event_loop: str = "auto"
    store_owner: str | None = None
    """Whose name the runtime owns stored sessions under (the front's, for its workers)."""
    mcp_policy: McpPolicy = field(default_factory=McpPolicy)
    """Which MCP servers clients may name; the default allows none."""

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> RuntimeOptions:
        """The runtime options of a parsed ``acp`` or ``serve`` command line."""
        return cls(
            provider=args.provider,
            model=args.model,
            fallback_model=tuple(args.fallback_model),
            base_url=args.base_url,
            max_retries=args.max_retries,
            max_retry_wait=args.max_retry_wait,
            max_sse_event_bytes=args.max_sse_event_bytes,
            context_window=args.context_window,
            compact_at=args.compact_at,
            replay=args.replay,
            allow_shell=args.allow_shell,
            mode=args.mode,
            scrub_env=tuple(args.scrub_env),
            pass_env=tuple(args.pass_env or ()),
            mcp_call_timeout=args.mcp_call_timeout,
            max_mcp_tools=args.max_mcp_tools,
            trust_mcp_server=tuple(args.trust_mcp_server),
            sandbox=args.sandbox,
            sandbox_network=args.sandbox_network,
            sandbox_limit=tuple(args.sandbox_limit),
            log_level=args.log_level,
            data_dir=args.data_dir,
            synchronous=args.synchronous,
            event_loop=args.event_loop,
        )

    def with_front(self, store_owner: str, mcp_policy: McpPolicy) -> RuntimeOptions:
        """These options as the front gives them to its workers."""
        return replace(self, store_owner=store_owner, mcp_policy=mcp_policy)
