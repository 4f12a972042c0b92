"""The processes a ``Runtime``'s tool calls leave behind, and when they are stopped.

Processes a tool call leaves behind (a shell command's background children)
live as long as the turn that started them: they are stopped once the session
has no prompt outstanding any more, and all of them at shutdown. A session's MCP
servers' processes live as long as the session; they are watched here too, so a
worker's front can kill them should the worker die.
"""

from __future__ import annotations

import threading
from collections import Counter

from toolprep.runtime.mcp.hub import McpHub
from toolprep.runtime.tools.process_groups import ProcessGroups
from toolprep.runtime.tools.registry import ToolRegistry

__all__ = ["TurnProcesses"]


class TurnProcesses:
    """Counts each session's outstanding prompts and stops its tool processes after."""

    def __init__(self, registry: ToolRegistry, mcp: McpHub) -> None:
        self._registry = registry
        self._mcp = mcp
        self._lock = threading.Lock()
        self._outstanding: Counter[str] = Counter()

    def prompt_started(self, session_id: str) -> None:
        with self._lock:
            self._outstanding[session_id] += 1

    def prompt_done(self, session_id: str) -> None:
        """Stop the session's leftover tool processes once no prompt of it is outstanding.

        Counting prompts rather than reacting to each reply keeps a prompt
        that is refused (another one is running) from stopping the running
        turn's processes. Runs on the emitter's thread, so it must not block.
        """
        with self._lock:
            self._outstanding[session_id] -= 1
            if self._outstanding[session_id] > 0:
                return
            del self._outstanding[session_id]
        for groups in self.tool_process_groups():
            groups.stop(session_id, wait=False)

    def tool_process_groups(self) -> list[ProcessGroups]:
        """The process-group trackers of the tools: a tool whose calls may leave
        processes behind keeps them in a ``ProcessGroups`` named ``processes``.

        Runs after every prompt, so the attribute is looked up, not matched against a
        runtime-checkable protocol (an ``isinstance`` that inspects every member each time).
        """
        found: list[ProcessGroups] = []
        for name in self._registry.names():
            groups = getattr(self._registry.get(name), "processes", None)
            if isinstance(groups, ProcessGroups) and groups not in found:
                found.append(groups)
        return found

    def watched_process_groups(self) -> list[ProcessGroups]:
        """Every process-group tracker whose groups must die with this process: the tools'
        and the MCP servers' (a worker's front kills them should the worker die)."""
        return [*self.tool_process_groups(), self._mcp.processes]

    def kill_now(self) -> None:
        """SIGKILL every tool and MCP server process at once; safe in a signal handler."""
        for groups in self.watched_process_groups():
            groups.kill_now()
