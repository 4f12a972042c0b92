"""todo_write: the model's task list, shown by the editor as an ACP plan.

The tool does nothing on disk. Its result carries ``plan`` entries, which the
runtime sends as an ACP ``plan`` update instead of a tool card (it filters the
card out by the name ``todo_write``). Each call replaces the whole list, as the
ACP plan update does. The list is bounded (``ToolConfig.max_todo_entries``
and ``max_todo_entry_chars``): every call resends it whole to the editor and
into the model's context, so a runaway list would cost both on every update.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from toolprep.runtime.tools.acp_shapes import PlanPriority, PlanStatus, plan_entry
from toolprep.runtime.tools.base import ToolContext, ToolError, ToolKind, ToolOutput
from toolprep.runtime.tools.builtin import BuiltinTool

_STATUS_MARK = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}


class TodoWriteTool(BuiltinTool):
    """Replace the session's todo list."""

    name = "todo_write"
    description = (
        "Replace your todo list for this task. Send the complete list every time, with each "
        "item's status (pending, in_progress, completed) and optional priority (high, medium, "
        "low; default medium). Keep exactly one item in_progress while working."
    )
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "todos": {
                "type": "array",
                "description": "The complete todo list.",
                "items": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "string", "minLength": 1},
                        "status": {
                            "type": "string",
                            "enum": ["pending", "in_progress", "completed"],
                        },
                        "priority": {"type": "string", "enum": ["high", "medium", "low"]},
                    },
                    "required": ["content", "status"],
                },
            },
        },
        "required": ["todos"],
    }
    kind: ToolKind = "think"

    def title(self, args: Mapping[str, Any]) -> str:
        return "Update plan"

    def _check_limits(self, todos: list[dict[str, Any]]) -> None:
        most, longest = self.config.max_todo_entries, self.config.max_todo_entry_chars
        if len(todos) > most:
            raise ToolError(
                f"{self.name}: {len(todos)} todos is over the limit of {most}; "
                "merge or drop items and send the list again"
            )
        for index, item in enumerate(todos):
            length = len(item["content"])
            if length > longest:
                raise ToolError(
                    f"{self.name}: todos[{index}].content is {length} characters, over the "
                    f"limit of {longest} characters per todo; shorten it"
                )

    def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        self._check_limits(args["todos"])
        entries: list[dict[str, Any]] = []
        for item in args["todos"]:
            status: PlanStatus = item["status"]
            priority: PlanPriority = item.get("priority") or "medium"
            entries.append(plan_entry(item["content"], status, priority))
        counts = {status: sum(e["status"] == status for e in entries) for status in _STATUS_MARK}
        lines = [f"{_STATUS_MARK[e['status']]} {e['content']} ({e['priority']})" for e in entries]
        summary = (
            f"Todo list updated: {len(entries)} items ({counts['completed']} completed, "
            f"{counts['in_progress']} in progress, {counts['pending']} pending)."
        )
        return ToolOutput(
            llm_output="\n".join([summary, *lines]),
            raw_output={"todos": entries},
            plan=tuple(entries),
        )
