"""todo_write plan entries, the registry, provenance, and argument validation messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolprep.runtime.providers.base import ToolDeclaration
from toolprep.runtime.tools.base import Tool, ToolContext, ToolError, ToolKind
from toolprep.runtime.tools.capture import HeadTailBuffer
from toolprep.runtime.tools.config import ToolConfig
from toolprep.runtime.tools.registry import ToolRegistry, default_registry, provenance
from toolprep.runtime.tools.todo import TodoWriteTool

Validate = Any
BUILTINS = (
    "read_file",
    "write_file",
    "list_directory",
    "glob",
    "search",
    "run_shell_command",
    "todo_write",
)


def test_todo_write_returns_plan_entries(ctx: ToolContext, acp_validate: Validate) -> None:
    tool = TodoWriteTool()
    out = tool.run(
        {
            "todos": [
                {"content": "Read the code", "status": "completed", "priority": "high"},
                {"content": "Fix the bug", "status": "in_progress"},
                {"content": "Write tests", "status": "pending", "priority": "low", "id": "3"},
            ]
        },
        ctx,
    )
    assert out.plan == (
        {"content": "Read the code", "status": "completed", "priority": "high"},
        {"content": "Fix the bug", "status": "in_progress", "priority": "medium"},
        {"content": "Write tests", "status": "pending", "priority": "low"},
    )
    for entry in out.plan:
        acp_validate("PlanEntry", entry)
    assert out.content == ()
    assert "3 items (1 completed, 1 in progress, 1 pending)" in out.llm_output
    assert tool.kind == "think"
    assert tool.title({}) == "Update plan"
    assert tool.needs_permission({}) is False
    assert tool.run({"todos": []}, ctx).plan == ()


@pytest.mark.parametrize(
    ("tool_name", "args", "message"),
    [
        ("read_file", {}, "read_file: missing required argument 'path'"),
        ("read_file", {"path": 3}, "read_file: argument 'path' must be string, got integer"),
        (
            "read_file",
            {"path": "a", "offset": "2"},
            "argument 'offset' must be integer, got string",
        ),
        (
            "read_file",
            {"path": "a", "offset": True},
            "argument 'offset' must be integer, got boolean",
        ),
        ("read_file", {"path": "a", "limit": 0}, "argument 'limit' must be at least 1"),
        ("read_file", {"path": ""}, "argument 'path' must not be empty"),
        ("write_file", {"path": "a"}, "write_file: missing required argument 'content'"),
        ("write_file", {"path": "a", "content": None}, "missing required argument 'content'"),
        ("glob", {"pattern": ["*"]}, "glob: argument 'pattern' must be string, got array"),
        ("search", {"pattern": "x", "glob": 1}, "search: argument 'glob' must be string"),
        (
            "run_shell_command",
            {"command": "ls", "timeout_s": 0},
            "'timeout_s' must be greater than 0",
        ),
        ("run_shell_command", {"command": "ls", "timeout_s": "5"}, "'timeout_s' must be number"),
        ("todo_write", {"todos": "x"}, "todo_write: argument 'todos' must be array, got string"),
        (
            "todo_write",
            {"todos": [{"status": "pending"}]},
            "missing required argument 'todos[0].content'",
        ),
        (
            "todo_write",
            {"todos": [{"content": "a", "status": "done"}]},
            "argument 'todos[0].status' must be one of 'pending', 'in_progress', 'completed', "
            "got 'done'",
        ),
        (
            "todo_write",
            {"todos": [{"content": "a", "status": "pending", "priority": "urgent"}]},
            "argument 'todos[0].priority' must be one of",
        ),
        ("list_directory", [], "list_directory: arguments must be object, got array"),
    ],
)
def test_bad_args_name_the_field(ctx: ToolContext, tool_name: str, args: Any, message: str) -> None:
    tool = default_registry(ToolConfig(allow_shell=True)).get(tool_name)
    assert tool is not None
    with pytest.raises(ToolError) as err:
        tool.run(args, ctx)
    assert message in str(err.value)


def test_optional_null_counts_as_absent(cwd: Path, ctx: ToolContext) -> None:
    (cwd / "a.txt").write_text("a\n")
    tool = default_registry().get("read_file")
    assert tool is not None
    assert tool.run({"path": "a.txt", "offset": None, "limit": None}, ctx).llm_output == "a\n"


def test_default_registry_has_all_builtins() -> None:
    registry = default_registry()
    assert registry.names() == BUILTINS
    assert len(registry) == len(BUILTINS) and "glob" in registry and "nope" not in registry
    assert registry.get("nope") is None
    declarations = registry.declarations()
    assert all(isinstance(d, ToolDeclaration) for d in declarations)
    assert [d.name for d in declarations] == list(BUILTINS)
    for declaration in declarations:
        assert declaration.description
        assert declaration.parameters["type"] == "object"
    declarations[0].parameters["properties"].clear()  # copies: the tool's schema is unaffected
    tool = registry.get("read_file")
    assert tool is not None and "path" in tool.parameters["properties"]


def test_tool_schemas_are_valid_json_schema() -> None:
    from jsonschema import Draft202012Validator

    for declaration in default_registry().declarations():
        Draft202012Validator.check_schema(declaration.parameters)


def test_every_builtin_kind_is_an_acp_tool_kind(acp_validate: Validate, cwd: Path) -> None:
    for name in BUILTINS:
        tool = default_registry().get(name)
        assert tool is not None
        acp_validate("ToolKind", tool.kind)
        assert isinstance(tool.title({}), str)  # titles work before arguments are known
        assert isinstance(tool.locations({}, cwd), list)


def test_config_is_shared_by_default_registry() -> None:
    config = ToolConfig(allow_shell=True)
    tool = default_registry(config).get("run_shell_command")
    assert tool is not None and tool.needs_permission({"command": "rm -rf /"}) is False


class _EchoTool:
    """A minimal tool as a hosting daemon would register it (no BuiltinTool base)."""

    def __init__(self, name: str = "mcp__github__search_issues") -> None:
        self.name = name
        self.description = "Search issues."
        self.parameters: dict[str, Any] = {
            "type": "object",
            "properties": {"q": {"type": "string"}},
        }
        self.kind: ToolKind = "fetch"

    def title(self, args: Any) -> str:
        return "Search issues"

    def locations(self, args: Any, cwd: Path) -> list[dict[str, Any]]:
        return []

    def needs_permission(self, args: Any) -> bool:
        return False

    def run(self, args: Any, ctx: ToolContext) -> Any:
        raise NotImplementedError


def test_daemon_can_register_and_replace_tools() -> None:
    registry = default_registry()
    extra: Tool = _EchoTool()
    registry.register(extra)
    assert registry.get("mcp__github__search_issues") is extra
    assert registry.names()[-1] == "mcp__github__search_issues"
    with pytest.raises(ValueError, match="already registered"):
        registry.register(_EchoTool())
    replacement = _EchoTool()
    registry.register(replacement, replace=True)
    assert registry.get(extra.name) is replacement
    assert registry.unregister(extra.name) is replacement
    assert registry.unregister(extra.name) is None
    with pytest.raises(ValueError, match="must match"):
        ToolRegistry().register(_EchoTool("has space"))


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("mcp__github__search_issues", ("mcp", "github")),
        ("mcp__fs__read__deep", ("mcp", "fs")),
        ("read_file", ("builtin", None)),
        ("mcp__", ("builtin", None)),
        ("mcp__server", ("builtin", None)),
        ("mcp__server__", ("builtin", None)),
        ("mcp____tool", ("builtin", None)),
        ("xmcp__a__b", ("builtin", None)),
    ],
)
def test_provenance(name: str, expected: tuple[str, str | None]) -> None:
    assert provenance(name) == expected
    assert ToolRegistry().provenance(name) == expected


@given(st.lists(st.binary(max_size=50), max_size=40), st.integers(min_value=1, max_value=64))
def test_head_tail_buffer_keeps_exact_head_and_tail(chunks: list[bytes], cap: int) -> None:
    buffer = HeadTailBuffer(cap)
    for chunk in chunks:
        buffer.write(chunk)
    data = b"".join(chunks)
    assert buffer.total == len(data)
    if len(data) <= cap:
        assert not buffer.truncated
        assert buffer.text() == data.decode("utf-8", errors="replace")
    else:
        head, tail = data[: cap // 2], data[len(data) - (cap - cap // 2) :]
        omitted = len(data) - len(head) - len(tail)
        expected = (
            head.decode("utf-8", errors="replace")
            + f"\n\n[... {omitted} bytes of output omitted ...]\n\n"
            + tail.decode("utf-8", errors="replace")
        )
        assert buffer.truncated and buffer.text() == expected
