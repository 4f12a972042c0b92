"""Limits and permissions shared by the built-in tools.

Every cap exists so that one tool call cannot flood the model's context, the
ACP connection or this process's memory; the defaults are sized for a coding
agent working on an ordinary repository. The config is frozen so one instance
can be shared by all sessions and worker threads.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from toolprep.runtime.tools.environment import EnvironmentPolicy
from toolprep.runtime.tools.hidden_paths import HiddenPaths


@dataclass(frozen=True, slots=True)
class ToolConfig:
    """Settings for the built-in tools.

    ``allow_shell`` lets every shell command run without asking the client.
    ``allowed_commands`` lists command prefixes (``"ls"``, ``"git status"``)
    that run without asking as long as the command is a single simple command;
    anything with shell operators still asks. ``max_timeout_s`` bounds any
    timeout the model requests, so a model cannot park a worker for hours.

    ``environment`` masks the agent's secrets in every tool's output (a ``.env`` file
    read by ``read_file`` holds the provider key as well as ``env`` does), and
    ``hidden_paths`` are refused by the file tools and passed over by their walks.

    ``max_walk_entries``, ``max_search_bytes`` and ``max_walk_seconds`` are the
    work budget of one glob or search call: files and directories visited,
    bytes read, and wall time. A call that spends one stops and returns its
    partial results with a note, rather than running unbounded.
    """

    allow_shell: bool = False
    allowed_commands: tuple[str, ...] = ()
    default_timeout_s: float = 120.0
    max_timeout_s: float = 600.0
    kill_grace_s: float = 1.0
    max_read_bytes: int = 256 * 1024
    max_shell_output_bytes: int = 64 * 1024
    max_list_entries: int = 500
    max_glob_results: int = 500
    max_search_results: int = 200
    max_search_line_chars: int = 300
    max_search_file_bytes: int = 8 * 1024 * 1024
    max_walk_entries: int = 100_000
    max_search_bytes: int = 256 * 1024 * 1024
    max_walk_seconds: float = 20.0
    # write_file cards and the todo list: a diff embeds old and new text in one
    # frame, so past max_diff_bytes (both together) the card shows a summary;
    # todo_write refuses lists longer or wordier than an editor's plan view holds.
    max_diff_bytes: int = 512 * 1024
    max_todo_entries: int = 100
    max_todo_entry_chars: int = 2000
    # What no tool's output may carry (masked as in a command's output), and the paths the
    # file tools refuse (the data directory, the usual credential files).
    environment: EnvironmentPolicy = field(default_factory=EnvironmentPolicy)
    hidden_paths: HiddenPaths = field(default_factory=HiddenPaths)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if value <= 0:
                raise ValueError(f"ToolConfig.{f.name} must be positive, got {value!r}")
        if self.default_timeout_s > self.max_timeout_s:
            raise ValueError("ToolConfig.default_timeout_s must not exceed max_timeout_s")
        if isinstance(self.allowed_commands, str):
            raise TypeError("ToolConfig.allowed_commands must be a tuple of strings, not a string")
