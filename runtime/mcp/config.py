"""Limits for the MCP servers of a runtime's sessions.

Frozen, so one instance serves every session and worker thread. Every bound
exists so that one misbehaving server costs one failed card or one missing
set of tools, never a stuck session: a server that does not start within
``start_timeout_s`` is left out, a call that gets no answer within
``call_timeout_s`` fails, a stopping server gets ``stop_grace_s`` per step
before it is killed, a server listing more than ``max_tools`` tools has the
rest left out (every model request of its session declares each one), and
what a call returns is capped before the model and the editor see it.

``policy`` says which servers a client may name at all (``runtime.mcp.policy``).
``trusted_servers`` are the names (as the client's ``mcpServers`` entries give
them) whose ``readOnlyHint`` is believed (``--trust-mcp-server``): MCP says a
hint from a server one does not trust must not be relied on, and a server is
code anyone can write, so by default a tool that says it only reads is treated
like one that writes (``runtime.mcp.tool``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from toolprep.runtime.mcp.policy import McpPolicy
from toolprep.runtime.tools.environment import EnvironmentPolicy
from toolprep.runtime.tools.sandbox import Sandbox

DEFAULT_CALL_TIMEOUT_S = 60.0
DEFAULT_MAX_TOOLS = 512
"""Tools offered per server: far above what a real server lists, far below what makes
each model request of the session slow to build and send."""


@dataclass(frozen=True, slots=True)
class McpConfig:
    """``environment`` decides what stdio servers inherit: the agent's environment minus
    its secrets, exactly as for shell commands."""

    # Below the worker front's 30 s wait for an open, so a slow server cannot leave a
    # session open in a worker whose front already gave up on it.
    start_timeout_s: float = 20.0
    call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    stop_grace_s: float = 1.0
    max_message_bytes: int = 16 * 1024 * 1024
    max_output_chars: int = 64 * 1024
    max_tools: int = DEFAULT_MAX_TOOLS
    environment: EnvironmentPolicy = field(default_factory=EnvironmentPolicy)
    policy: McpPolicy = field(default_factory=McpPolicy.trusted)
    trusted_servers: frozenset[str] = frozenset()
    sandbox: Sandbox | None = None
    """Confines each stdio server as it confines shell commands (None: unconfined)."""

    def __post_init__(self) -> None:
        positive = (
            "start_timeout_s",
            "call_timeout_s",
            "max_message_bytes",
            "max_output_chars",
            "max_tools",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"McpConfig.{name} must be positive, got {getattr(self, name)!r}")
        if self.stop_grace_s < 0:
            raise ValueError(f"McpConfig.stop_grace_s must be >= 0, got {self.stop_grace_s!r}")
