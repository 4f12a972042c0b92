"""Which actor plays each role of a ``Runtime``, and with what arguments.

One table serves both the actor runtime and anything that runs the same
handlers another way (the no-actor benchmark baseline), so the two cannot
drift apart.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from toolprep.actors.acp_emitter import AcpEmitter
from toolprep.actors.base import EMITTER, EXECUTOR, READER, SUPERVISOR, TRACKER, RoleActor
from toolprep.actors.directory import RoleDirectory
from toolprep.actors.preparation_tracker import PreparationTracker
from toolprep.actors.session_supervisor import SessionSupervisor
from toolprep.actors.stream_reader import StreamReader
from toolprep.actors.supervisor_state import TurnConfig
from toolprep.actors.tool_executor import ToolExecutor
from toolprep.runtime.tools.base import ClientFilesystem
from toolprep.runtime.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from toolprep.runtime.hosting.runtime import Runtime

__all__ = ["RoleSpecs", "role_specs", "start_roles"]

RoleSpecs = dict[str, tuple[type[RoleActor], tuple[Any, ...], dict[str, Any]]]
"""Each role's actor class and constructor arguments (after the directory)."""


def role_specs(
    runtime: Runtime, client_fs_for: Callable[[str], ClientFilesystem | None]
) -> RoleSpecs:
    """The roles of ``runtime``, over its role states, routes, tools and settings."""
    cfg = runtime.config
    turn_config = TurnConfig(
        system_prompt=cfg.system_prompt,
        max_tokens=cfg.max_tokens,
        max_requests_per_turn=cfg.max_requests_per_turn,
        retry=cfg.retry,
        compaction=cfg.compaction,
    )
    executor_options = {
        "workers": cfg.tool_workers,
        "timeout": cfg.tool_timeout,
        "client_fs_for": client_fs_for,
        "session_tool": runtime.mcp.tool,
        "mode_of": runtime.mode_of,
    }
    registry = runtime.registry
    return {
        EMITTER: (AcpEmitter, (runtime.emitter_state,), {}),
        EXECUTOR: (
            ToolExecutor,
            (runtime.executor_state, registry, runtime.scheduler),
            executor_options,
        ),
        TRACKER: (
            PreparationTracker,
            (runtime.tracker_state, functools.partial(_kind_of, registry)),
            {},
        ),
        READER: (StreamReader, (runtime.reader_state, runtime.routes), {}),
        SUPERVISOR: (
            SessionSupervisor,
            (
                runtime.supervisor_state,
                runtime.routes,
                registry.declarations(),
                runtime.scheduler,
                turn_config,
            ),
            {},
        ),
    }


def start_roles(directory: RoleDirectory, specs: RoleSpecs) -> None:
    """Register each role's factory with ``directory``, which starts it."""
    for role, (cls, args, options) in specs.items():
        directory.register(role, functools.partial(cls.start, directory, *args, **options))


def _kind_of(registry: ToolRegistry, tool_name: str) -> str:
    tool = registry.get(tool_name)
    return tool.kind if tool is not None else "other"
