"""read_file and write_file: the tools that touch file contents.

Both confine their path to the session cwd, and open it through
``confined_fs`` so a symlink swapped in mid-call cannot lead them outside. Reading is bounded by
``ToolConfig.max_read_bytes`` so a log file or a minified bundle cannot fill
the model's context; the truncation note tells the model which ``offset`` to
ask for next. Writing reports an ACP diff so the editor can show the change,
or a summary when the diff would be huge or binary (see ``write_card``).
"""

from __future__ import annotations

import codecs
import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO, ClassVar

from toolprep.runtime.tools.acp_shapes import code_block, location, text_content
from toolprep.runtime.tools.base import (
    ClientFilesystem,
    ToolContext,
    ToolError,
    ToolKind,
    ToolOutput,
)
from toolprep.runtime.tools.builtin import BuiltinTool, int_arg, str_arg
from toolprep.runtime.tools.confined_fs import (
    make_directories,
    open_for_reading,
    open_for_writing,
    regular_file,
)
from toolprep.runtime.tools.paths import display_path, resolve_path, title_path
from toolprep.runtime.tools.write_card import FileVersion, change_content, scan_file

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


def _open_failure(tool: str, raw: str, exc: OSError, verb: str) -> ToolError:
    """The one wording of a failed open, shared by both tools."""
    match exc:
        case FileNotFoundError():
            return ToolError(f"{tool}: {raw!r} does not exist")
        case IsADirectoryError():
            return ToolError(f"{tool}: {raw!r} is a directory")
        case NotADirectoryError() | FileExistsError():
            return ToolError(f"{tool}: a parent of {raw!r} is not a directory")
        case _:
            return ToolError(f"{tool}: cannot {verb} {raw!r}: {exc.strerror}")


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
        cap = self.config.max_read_bytes
        try:
            fd = open_for_reading(raw, ctx.cwd)
        except OSError as exc:
            raise _open_failure(self.name, raw, exc, "access") from None
        try:
            with regular_file(fd, raw, self.name, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if b"\0" in handle.read(_SNIFF_BYTES):
                    note = f"{raw} looks like a binary file ({size} bytes); not shown."
                    return ToolOutput(
                        llm_output=note,
                        content=(text_content(note),),
                        raw_output={"path": str(path), "binary": True, "bytes": size},
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
                "bytes": size,
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
        try:
            encoded = new_text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ToolError(
                f"{self.name}: argument 'content' is not valid text: {exc.reason}"
            ) from None
        cap = self.config.max_diff_bytes
        new = FileVersion.of_text(new_text, cap)
        try:
            opened = open_for_writing(raw, ctx.cwd)
        except OSError as exc:
            raise _open_failure(self.name, raw, exc, "write") from None
        old: FileVersion | None = None
        unchanged = False
        try:
            with regular_file(opened.fd, raw, self.name, "r+b") as handle:
                if not opened.created:
                    old, unchanged = scan_file(handle, max(cap - new.size, 0), encoded)
                if not unchanged:
                    handle.seek(0)
                    handle.truncate()
                    handle.write(encoded)
        except OSError as exc:
            raise ToolError(f"{self.name}: cannot write {raw!r}: {exc.strerror}") from None
        shown = display_path(path, ctx.cwd)
        if old is None:
            summary = f"Created {shown} ({len(encoded)} bytes)."
        elif unchanged:
            summary = f"{shown} already had this content; nothing changed."
        else:
            summary = f"Updated {shown} ({len(encoded)} bytes)."
        return ToolOutput(
            llm_output=summary,
            content=(change_content(path, old, new, cap),),
            raw_output={"path": str(path), "created": old is None, "bytes": len(encoded)},
        )

    def _write_through_client(
        self, fs: ClientFilesystem, path: Path, new_text: str, ctx: ToolContext
    ) -> ToolOutput:
        """Let the editor write, so the change shows in its buffers and undo history.

        The editor opens the path itself; what this process opens (the old
        content when the editor cannot read, the parent folders) still goes
        through the confined walk.
        """
        raw = str(path)
        cap = self.config.max_diff_bytes
        new = FileVersion.of_text(new_text, cap)
        keep = max(cap - new.size, 0)
        old = self._old_version_on_disk(raw, ctx, keep, new_text)
        if old is not None and fs.can_read:
            # Unsaved buffers included; if the editor cannot, the disk's version will do.
            with contextlib.suppress(ToolError):
                old = FileVersion.of_text(fs.read_text_file(raw), keep)
        try:
            make_directories(os.path.dirname(raw), ctx.cwd)  # editors write files, not folders
        except OSError as exc:
            raise ToolError(
                f"{self.name}: cannot create the folder of {path}: {exc.strerror}"
            ) from None
        fs.write_text_file(raw, new_text)
        shown = display_path(path, ctx.cwd)
        verb = "Created" if old is None else "Updated"
        return ToolOutput(
            llm_output=f"{verb} {shown} ({len(new_text.encode('utf-8'))} bytes).",
            content=(change_content(path, old, new, cap),),
            raw_output={"path": raw, "created": old is None, "source": "client"},
        )

    def _old_version_on_disk(
        self, raw: str, ctx: ToolContext, keep: int, new_text: str
    ) -> FileVersion | None:
        """The file as it is on disk, or None when there is none (or it cannot be read)."""
        try:
            fd = open_for_reading(raw, ctx.cwd)
        except OSError:
            return None
        try:
            with regular_file(fd, raw, self.name, "rb") as handle:
                version, _ = scan_file(handle, keep, new_text.encode("utf-8"))
        except (ToolError, OSError):
            return None
        return version
