"""read_file and write_file on real files, with their ACP shapes checked against the schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from toolprep.runtime.tools.base import ToolContext, ToolError
from toolprep.runtime.tools.config import ToolConfig
from toolprep.runtime.tools.files import ReadFileTool, WriteFileTool

Validate = Any


def _text(item: dict[str, Any]) -> str:
    assert item["type"] == "content" and item["content"]["type"] == "text"
    text: str = item["content"]["text"]
    return text


def test_read_file_returns_text_content(
    cwd: Path, ctx: ToolContext, acp_validate: Validate
) -> None:
    (cwd / "README.md").write_text("# Title\nbody\n")
    tool = ReadFileTool()
    out = tool.run({"path": "README.md"}, ctx)
    assert out.llm_output == "# Title\nbody\n"
    assert len(out.content) == 1 and "# Title\nbody\n" in _text(out.content[0])
    for item in out.content:
        acp_validate("ToolCallContent", item)
    assert out.raw_output["truncated"] is False
    assert tool.kind == "read"
    assert tool.title({"path": "README.md"}) == "Read README.md"


def test_read_file_offset_and_limit(cwd: Path, ctx: ToolContext, acp_validate: Validate) -> None:
    (cwd / "n.txt").write_text("".join(f"line{i}\n" for i in range(1, 11)))
    tool = ReadFileTool()
    out = tool.run({"path": "n.txt", "offset": 3, "limit": 2}, ctx)
    assert out.llm_output == "line3\nline4\n"
    assert (out.raw_output["startLine"], out.raw_output["endLine"]) == (3, 4)
    assert tool.run({"path": "n.txt", "offset": 10}, ctx).llm_output == "line10\n"
    with pytest.raises(ToolError, match="past the end"):
        tool.run({"path": "n.txt", "offset": 11}, ctx)
    locations = tool.locations({"path": "n.txt", "offset": 3}, cwd)
    assert locations == [{"path": str(cwd / "n.txt"), "line": 3}]
    acp_validate("ToolCallLocation", locations[0])
    assert tool.title({"path": "n.txt", "offset": 3, "limit": 2}) == "Read n.txt (lines 3-4)"


def test_read_file_counts_only_newlines_as_line_breaks(cwd: Path, ctx: ToolContext) -> None:
    (cwd / "cr.txt").write_bytes(b"a\rb\nc\n")
    out = ReadFileTool().run({"path": "cr.txt", "offset": 2}, ctx)
    assert out.llm_output == "c\n"
    assert ReadFileTool().run({"path": "cr.txt", "limit": 1}, ctx).llm_output == "a\rb\n"


def test_read_file_truncates_at_byte_cap_with_note(cwd: Path, ctx: ToolContext) -> None:
    (cwd / "big.txt").write_text("".join(f"{i:05d}\n" for i in range(10_000)))
    tool = ReadFileTool(ToolConfig(max_read_bytes=1000))
    out = tool.run({"path": "big.txt"}, ctx)
    shown, _, note = out.llm_output.rpartition("\n\n[")
    assert len(shown.encode()) <= 1000
    assert shown.endswith("\n")
    end_line = out.raw_output["endLine"]
    assert end_line == 166  # 166 six-byte lines fit in 1000 bytes
    assert f"offset={end_line + 1}" in note
    assert out.raw_output["truncated"] is True
    follow = tool.run({"path": "big.txt", "offset": end_line + 1, "limit": 1}, ctx)
    assert follow.llm_output == f"{end_line:05d}\n"


def test_read_file_cuts_a_single_huge_line(cwd: Path, ctx: ToolContext) -> None:
    (cwd / "min.js").write_text("é" * 5000)
    out = ReadFileTool(ToolConfig(max_read_bytes=1001)).run({"path": "min.js"}, ctx)
    assert "longer than the 1001-byte cap" in out.llm_output
    assert "\ufffd" not in out.llm_output  # a cut multi-byte character is dropped, not garbled


def test_read_file_binary_and_errors(cwd: Path, ctx: ToolContext) -> None:
    (cwd / "blob.bin").write_bytes(b"\x00\x01\x02" * 100)
    (cwd / "dir").mkdir()
    tool = ReadFileTool()
    assert "binary" in tool.run({"path": "blob.bin"}, ctx).llm_output
    with pytest.raises(ToolError, match=r"'missing\.txt' does not exist"):
        tool.run({"path": "missing.txt"}, ctx)
    with pytest.raises(ToolError, match="is a directory"):
        tool.run({"path": "dir"}, ctx)
    (cwd / "e.txt").touch()
    assert "empty" in tool.run({"path": "e.txt"}, ctx).llm_output


def test_read_file_refuses_escapes(cwd: Path, outside: Path, ctx: ToolContext) -> None:
    (cwd / "link").symlink_to(outside / "secret.txt")
    tool = ReadFileTool()
    for path in ("../outside/secret.txt", str(outside / "secret.txt"), "link"):
        with pytest.raises(ToolError) as err:
            tool.run({"path": path}, ctx)
        assert path in str(err.value)
        assert tool.locations({"path": path}, cwd) == []


def test_write_file_creates_with_parents_and_null_old_text(
    cwd: Path, ctx: ToolContext, acp_validate: Validate
) -> None:
    tool = WriteFileTool()
    out = tool.run({"path": "src/pkg/new.py", "content": "print('hi')\n"}, ctx)
    target = cwd / "src" / "pkg" / "new.py"
    assert target.read_text() == "print('hi')\n"
    assert out.content == (
        {"type": "diff", "path": str(target), "oldText": None, "newText": "print('hi')\n"},
    )
    acp_validate("ToolCallContent", out.content[0])
    assert out.raw_output["created"] is True
    assert "Created" in out.llm_output
    assert tool.kind == "edit"
    assert tool.title({"path": "src/pkg/new.py"}) == "Write src/pkg/new.py"
    location = tool.locations({"path": "src/pkg/new.py"}, cwd)
    assert location == [{"path": str(target)}]
    acp_validate("ToolCallLocation", location[0])


def test_write_file_overwrite_reports_old_text(
    cwd: Path, ctx: ToolContext, acp_validate: Validate
) -> None:
    (cwd / "a.txt").write_text("old\r\n")
    out = WriteFileTool().run({"path": "a.txt", "content": "new\r\n"}, ctx)
    assert (cwd / "a.txt").read_bytes() == b"new\r\n"  # written verbatim, no newline translation
    assert out.content[0]["oldText"] == "old\r\n"
    assert out.content[0]["newText"] == "new\r\n"
    acp_validate("ToolCallContent", out.content[0])
    assert "Updated" in out.llm_output


def test_write_file_through_inside_symlink_writes_target(cwd: Path, ctx: ToolContext) -> None:
    (cwd / "real.txt").write_text("before")
    (cwd / "alias.txt").symlink_to(cwd / "real.txt")
    WriteFileTool().run({"path": "alias.txt", "content": "after"}, ctx)
    assert (cwd / "alias.txt").is_symlink()
    assert (cwd / "real.txt").read_text() == "after"


def test_write_file_refuses_escapes_and_creates_nothing(
    cwd: Path, outside: Path, ctx: ToolContext
) -> None:
    (cwd / "out").symlink_to(outside, target_is_directory=True)
    tool = WriteFileTool()
    for path in ("../outside/x.txt", str(outside / "y.txt"), "out/z.txt", "out/deep/z.txt"):
        with pytest.raises(ToolError) as err:
            tool.run({"path": path, "content": "pwned"}, ctx)
        assert path in str(err.value)
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "top secret\n"


def test_write_file_onto_directory_or_under_file_fails(cwd: Path, ctx: ToolContext) -> None:
    (cwd / "d").mkdir()
    (cwd / "f").write_text("")
    tool = WriteFileTool()
    with pytest.raises(ToolError, match="is a directory"):
        tool.run({"path": "d", "content": "x"}, ctx)
    with pytest.raises(ToolError, match="not a directory"):
        tool.run({"path": "f/child.txt", "content": "x"}, ctx)


def test_read_file_offset_far_into_a_large_file(cwd: Path, ctx: ToolContext) -> None:
    (cwd / "long.txt").write_text("".join(f"{i}\n" for i in range(1, 100_001)))
    out = ReadFileTool().run({"path": "long.txt", "offset": 76_543, "limit": 3}, ctx)
    assert out.llm_output == "76543\n76544\n76545\n"
    last = ReadFileTool().run({"path": "long.txt", "offset": 100_000}, ctx)
    assert last.llm_output == "100000\n"
