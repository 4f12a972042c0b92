"""read_file and write_file: the tools that touch file contents.

Both confine their path to the session cwd. Reading is bounded by
``ToolConfig.max_read_bytes`` so a log file or a minified bundle cannot fill
the model's context; the truncation note tells the model which ``offset`` to
ask for next. Writing reports an ACP diff so the editor can show the change.
"""

from __future__ import annotations

import codecs
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO, ClassVar

from toolprep.runtime.tools.acp_shapes import code_block, diff_content, location, text_content
from toolprep.runtime.tools.base import (
    ClientFilesystem,
    ToolContext,
    ToolError,
    ToolKind,
    ToolOutput,
)
from toolprep.runtime.tools.builtin import BuiltinTool, int_arg, str_arg
from toolprep.runtime.tools.paths import display_path, resolve_path, title_path

_SNIFF_BYTES = 8192
_BLOCK = 64 * 1024


def _confined_location(
    args: Mapping[str, Any], cwd: Path, line: int | None = None
) -> list[dict[str, Any]]:
    raw = str_arg(args, "path")
    if raw is None:
        return []
    try:
        return [location(resolve_path(raw, cwd), line)]
    except ToolError:
        return []


def _decode(data: bytes, *, final: bool) -> str:
    """UTF-8 with replacement; when not final, drop a multi-byte char cut in half."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    return decoder.decode(data, final=final)


def _split_lines(data: bytes) -> list[bytes]:
    """Lines ending in ``\n`` (kept), counted the same way as ``_skip_lines`` counts them.

    ``bytes.splitlines`` would also split on a lone ``\r``, making offsets
    disagree between the skip and the window for such files.
    """
    parts = data.split(b"\n")
    lines = [part + b"\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _stat_regular(path: Path, raw: str, tool: str) -> os.stat_result:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ToolError(f"{tool}: {raw!r} does not exist") from None
    except OSError as exc:
        raise ToolError(f"{tool}: cannot access {raw!r}: {exc.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        raise ToolError(f"{tool}: {raw!r} is a directory")
    if not stat.S_ISREG(info.st_mode):
        raise ToolError(f"{tool}: {raw!r} is not a regular file")
    return info


def _skip_lines(handle: BinaryIO, count: int) -> int:
    """Advance past ``count`` newlines; return how many were found before EOF."""
    seen = 0
    while seen < count:
        start = handle.tell()
        block = handle.read(_BLOCK)
        if not block:
            return seen
        index = -1
        while seen < count:
            index = block.find(b"\n", index + 1)
            if index < 0:
                break
            seen += 1
        if seen == count and index >= 0:
            handle.seek(start + index + 1)
    return seen


def _text_output(text: str, note: str, *, empty: bool, raw_output: dict[str, Any]) -> ToolOutput:
    """File text for the model and the card, with the truncation note in both."""
    llm_text = text if text or not empty else "(the file is empty)"
    if note:
        llm_text = f"{text}\n\n[{note}]"
    content = [text_content(code_block(text))]
    if note:
        content.append(text_content(f"_{note}_"))
    return ToolOutput(llm_output=llm_text, content=tuple(content), raw_output=raw_output)


class ReadFileTool(BuiltinTool):
    """Read a text file inside the session directory, optionally a line range."""

    name = "read_file"
    description = (
        "Read a text file in the working directory. Paths are relative to the working "
        "directory. Use offset (1-based first line) and limit (number of lines) to read "
        "part of a large file; output longer than the size cap is truncated with a note."
    )
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "description": "File to read."},
            "offset": {
                "type": "integer",
                "minimum": 1,
                "description": "First line to read (1-based).",
            },
            "limit": {"type": "integer", "minimum": 1, "description": "Maximum number of lines."},
        },
        "required": ["path"],
    }
    kind: ToolKind = "read"

    def title(self, args: Mapping[str, Any]) -> str:
        raw = str_arg(args, "path")
        if raw is None:
            return "Read file"
        name = title_path(raw)
        offset, limit = int_arg(args, "offset"), int_arg(args, "limit")
        if offset is not None and limit is not None:
            return f"Read {name} (lines {offset}-{offset + limit - 1})"
        if offset is not None:
            return f"Read {name} (from line {offset})"
        if limit is not None:
            return f"Read {name} (first {limit} lines)"
        return f"Read {name}"

    def locations(self, args: Mapping[str, Any], cwd: Path) -> list[dict[str, Any]]:
        return _confined_location(args, cwd, int_arg(args, "offset"))

    def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        raw: str = args["path"]
        path = resolve_path(raw, ctx.cwd)
        offset: int = args.get("offset") or 1
        limit: int | None = args.get("limit")
        fs = ctx.client_fs
        if fs is not None and fs.can_read:
            return self._read_through_client(fs, raw, path, offset, limit)
        info = _stat_regular(path, raw, self.name)
        cap = self.config.max_read_bytes
        try:
            with open(path, "rb") as handle:
                if b"\0" in handle.read(_SNIFF_BYTES):
                    note = f"{raw} looks like a binary file ({info.st_size} bytes); not shown."
                    return ToolOutput(
                        llm_output=note,
                        content=(text_content(note),),
                        raw_output={"path": str(path), "binary": True, "bytes": info.st_size},
                    )
                handle.seek(0)
                skipped = _skip_lines(handle, offset - 1)
                data = handle.read(cap + 1)
        except OSError as exc:
            raise ToolError(f"{self.name}: cannot read {raw!r}: {exc.strerror}") from None
        if skipped < offset - 1 or (offset > 1 and not data):
            raise ToolError(
                f"{self.name}: offset {offset} is past the end of {raw!r} "
                f"(it has fewer than {offset} lines)"
            )
        text, end_line, note = self._window(data, offset, limit, cap)
        return _text_output(
            text,
            note,
            empty=offset == 1,
            raw_output={
                "path": str(path),
                "startLine": offset,
                "endLine": end_line,
                "truncated": bool(note),
                "bytes": info.st_size,
            },
        )

    def _read_through_client(
        self, fs: ClientFilesystem, raw: str, path: Path, offset: int, limit: int | None
    ) -> ToolOutput:
        """The editor's view of the file, unsaved changes included."""
        text = fs.read_text_file(str(path), line=offset if offset > 1 else None, limit=limit)
        data = text.encode("utf-8")
        cap = self.config.max_read_bytes
        note = ""
        if len(data) > cap:
            text = _decode(data[:cap], final=False)
            note = (
                f"Output truncated at {cap} bytes; call read_file with a larger offset to continue."
            )
        return _text_output(
            text,
            note,
            empty=True,
            raw_output={
                "path": str(path),
                "startLine": offset,
                "truncated": bool(note),
                "source": "client",
            },
        )

    def _window(
        self, data: bytes, offset: int, limit: int | None, cap: int
    ) -> tuple[str, int, str]:
        """Cut ``data`` (up to cap+1 bytes from line ``offset``) to the lines to show.

        Returns the text, the last line number shown and a truncation note
        (empty when everything requested was shown).
        """
        over_cap = len(data) > cap
        window = data[:cap]
        lines = _split_lines(window)
        note = ""
        if limit is not None and len(lines) > limit:
            lines = lines[:limit]
            over_cap = False
        if over_cap and lines and (lines[-1].endswith(b"\n") or len(lines) > 1):
            if not lines[-1].endswith(b"\n"):
                lines = lines[:-1]
            end_line = offset + len(lines) - 1
            note = (
                f"Output truncated at {cap} bytes after line {end_line}; "
                f"call read_file with offset={end_line + 1} to continue."
            )
            return _decode(b"".join(lines), final=True), end_line, note
        if over_cap:
            note = (
                f"Line {offset} is longer than the {cap}-byte cap and was cut off; "
                "the rest of the file is not shown."
            )
            return _decode(window, final=False), offset, note
        end_line = offset + len(lines) - 1
        return _decode(b"".join(lines), final=True), end_line, note


class WriteFileTool(BuiltinTool):
    """Create or overwrite a text file inside the session directory."""

    name = "write_file"
    description = (
        "Write a text file in the working directory, replacing its contents or creating it "
        "(and any missing parent directories). Paths are relative to the working directory."
    )
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "description": "File to write."},
            "content": {"type": "string", "description": "The complete new file contents."},
        },
        "required": ["path", "content"],
    }
    kind: ToolKind = "edit"

    def title(self, args: Mapping[str, Any]) -> str:
        raw = str_arg(args, "path")
        if raw is None:
            return "Write file"
        return f"Write {title_path(raw)}"

    def locations(self, args: Mapping[str, Any], cwd: Path) -> list[dict[str, Any]]:
        return _confined_location(args, cwd)

    def execute(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        raw: str = args["path"]
        new_text: str = args["content"]
        path = resolve_path(raw, ctx.cwd)
        fs = ctx.client_fs
        if fs is not None and fs.can_write:
            return self._write_through_client(fs, path, new_text, ctx)
        old_text: str | None = None
        if os.path.exists(path):
            _stat_regular(path, raw, self.name)
            try:
                old_text = _decode(path.read_bytes(), final=True)
            except OSError as exc:
                raise ToolError(f"{self.name}: cannot read {raw!r}: {exc.strerror}") from None
        try:
            encoded = new_text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ToolError(
                f"{self.name}: argument 'content' is not valid text: {exc.reason}"
            ) from None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # Re-check after mkdir: the directories now exist, so realpath sees them.
            target = os.path.realpath(resolve_path(raw, ctx.cwd))
            with open(target, "wb") as handle:
                handle.write(encoded)
        except (FileExistsError, NotADirectoryError):
            raise ToolError(f"{self.name}: a parent of {raw!r} is not a directory") from None
        except OSError as exc:
            raise ToolError(f"{self.name}: cannot write {raw!r}: {exc.strerror}") from None
        shown = display_path(path, ctx.cwd)
        if old_text is None:
            summary = f"Created {shown} ({len(encoded)} bytes)."
        elif old_text == new_text:
            summary = f"{shown} already had this content; nothing changed."
        else:
            summary = f"Updated {shown} ({len(encoded)} bytes)."
        return ToolOutput(
            llm_output=summary,
            content=(diff_content(path, old_text, new_text),),
            raw_output={"path": str(path), "created": old_text is None, "bytes": len(encoded)},
        )

    def _write_through_client(
        self, fs: ClientFilesystem, path: Path, new_text: str, ctx: ToolContext
    ) -> ToolOutput:
        """Let the editor write, so the change shows in its buffers and undo history."""
        old_text: str | None = None
        if os.path.exists(path):
            try:
                old_text = fs.read_text_file(str(path)) if fs.can_read else path.read_text("utf-8")
            except (OSError, UnicodeDecodeError):
                old_text = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)  # editors write files, not directories
        except OSError as exc:
            raise ToolError(
                f"{self.name}: cannot create the folder of {path}: {exc.strerror}"
            ) from None
        fs.write_text_file(str(path), new_text)
        shown = display_path(path, ctx.cwd)
        verb = "Created" if old_text is None else "Updated"
        return ToolOutput(
            llm_output=f"{verb} {shown} ({len(new_text.encode('utf-8'))} bytes).",
            content=(diff_content(path, old_text, new_text),),
            raw_output={"path": str(path), "created": old_text is None, "source": "client"},
        )
