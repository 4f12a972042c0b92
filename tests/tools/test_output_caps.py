"""Bounded tool outputs: write_file cards for huge or binary files, todo_write list limits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from toolprep.runtime.tools.base import ToolContext, ToolError
from toolprep.runtime.tools.config import ToolConfig
from toolprep.runtime.tools.files import WriteFileTool
from toolprep.runtime.tools.todo import TodoWriteTool

Validate = Any
TEN_MIB = 10 * 1024 * 1024


def _card_text(item: dict[str, Any]) -> str:
    assert item["type"] == "content", item["type"]
    text: str = item["content"]["text"]
    return text


def test_huge_old_file_gets_a_summary_not_a_diff(
    cwd: Path, ctx: ToolContext, acp_validate: Validate
) -> None:
    (cwd / "big.log").write_bytes((b"y" * 1023 + b"\n") * (TEN_MIB // 1024))
    out = WriteFileTool().run({"path": "big.log", "content": "short\n"}, ctx)
    assert (cwd / "big.log").read_bytes() == b"short\n"
    (card,) = out.content
    acp_validate("ToolCallContent", card)
    assert len(orjson.dumps(card)) < 1024  # was a frame of more than ten megabytes
    text = _card_text(card)
    cap = ToolConfig().max_diff_bytes
    over = TEN_MIB + len("short\n") - cap
    assert f"diff omitted: {over} bytes over the {cap}-byte cap" in text
    assert "6 bytes, 1 line (was 10485760 bytes, 10240 lines)" in text
    assert "Updated" in out.llm_output


def test_new_content_over_the_cap_is_summarised_on_creation(cwd: Path, ctx: ToolContext) -> None:
    tool = WriteFileTool(ToolConfig(max_diff_bytes=100))
    out = tool.run({"path": "n.txt", "content": "a\n" * 60}, ctx)
    text = _card_text(out.content[0])
    assert text.startswith("Created ") and "120 bytes, 60 lines" in text
    assert "diff omitted: 20 bytes over the 100-byte cap" in text
    assert (cwd / "n.txt").read_text() == "a\n" * 60


def test_diff_within_the_cap_is_still_a_diff(cwd: Path, ctx: ToolContext) -> None:
    (cwd / "s.txt").write_text("a" * 50)
    tool = WriteFileTool(ToolConfig(max_diff_bytes=100))
    assert tool.run({"path": "s.txt", "content": "b" * 50}, ctx).content[0] == {
        "type": "diff",
        "path": str(cwd / "s.txt"),
        "oldText": "a" * 50,
        "newText": "b" * 50,
    }
    over = tool.run({"path": "s.txt", "content": "c" * 51}, ctx).content[0]
    assert "diff omitted: 1 bytes over the 100-byte cap" in _card_text(over)


@pytest.mark.parametrize(
    "old_bytes", [b"\x00\x01\x02binary", b"caf\xe9 latin-1", b"ok" * 10 + b"\xff"]
)
def test_binary_old_content_is_summarised_never_embedded(
    cwd: Path, ctx: ToolContext, old_bytes: bytes
) -> None:
    (cwd / "blob").write_bytes(old_bytes)
    out = WriteFileTool().run({"path": "blob", "content": "text now\n"}, ctx)
    text = _card_text(out.content[0])
    assert "binary content" in text and f"was binary, {len(old_bytes)} bytes" in text
    assert "\ufffd" not in str(out.content)
    assert (cwd / "blob").read_bytes() == b"text now\n"


def test_binary_new_content_is_summarised(cwd: Path, ctx: ToolContext) -> None:
    out = WriteFileTool().run({"path": "nul.bin", "content": "a\0b"}, ctx)
    text = _card_text(out.content[0])
    assert "binary, 3 bytes" in text and "a\0b" not in text
    assert (cwd / "nul.bin").read_bytes() == b"a\0b"


def test_unchanged_huge_file_is_left_alone(cwd: Path, ctx: ToolContext) -> None:
    content = "z" * 2000 + "\n"
    (cwd / "same.txt").write_text(content)
    out = WriteFileTool(ToolConfig(max_diff_bytes=100)).run(
        {"path": "same.txt", "content": content}, ctx
    )
    assert "already had this content" in out.llm_output


def test_diff_cap_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_diff_bytes must be positive"):
        ToolConfig(max_diff_bytes=0)


def _todos(count: int, content: str = "step") -> dict[str, Any]:
    return {"todos": [{"content": content, "status": "pending"} for _ in range(count)]}


def test_todo_write_caps_the_number_of_entries(ctx: ToolContext) -> None:
    tool = TodoWriteTool(ToolConfig(max_todo_entries=5))
    assert len(tool.run(_todos(5), ctx).plan or ()) == 5
    with pytest.raises(ToolError, match="6 todos is over the limit of 5") as err:
        tool.run(_todos(6), ctx)
    assert str(err.value).startswith("todo_write: ")


def test_todo_write_caps_each_entry(ctx: ToolContext) -> None:
    tool = TodoWriteTool(ToolConfig(max_todo_entry_chars=10))
    assert tool.run(_todos(1, "x" * 10), ctx).plan
    with pytest.raises(ToolError, match=r"todos\[0\]\.content is 11 characters") as err:
        tool.run(_todos(1, "x" * 11), ctx)
    assert "limit of 10 characters per todo" in str(err.value)


def test_todo_write_default_limits_refuse_a_runaway_list(ctx: ToolContext) -> None:
    config = ToolConfig()
    tool = TodoWriteTool()
    with pytest.raises(ToolError, match=f"over the limit of {config.max_todo_entries}"):
        tool.run(_todos(10_000), ctx)
    with pytest.raises(ToolError, match=f"limit of {config.max_todo_entry_chars} characters"):
        tool.run(_todos(1, "w" * 1_000_000), ctx)
