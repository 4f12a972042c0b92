"""How write_file shows a change on its card: a diff when it is small text, else a summary.

An ACP diff embeds the whole old and new text in one frame, so rewriting a
10 MiB file used to send the editor a frame of tens of megabytes to parse and
render, and binary content came out mangled by UTF-8 replacement. Beyond
``ToolConfig.max_diff_bytes`` (old plus new), or when either side is binary
(NUL bytes or invalid UTF-8), the card states sizes and line counts instead.
The old file is scanned in blocks, so its text is held only when it will be
shown.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final

from toolprep.runtime.tools.acp_shapes import diff_content, text_content

_BLOCK: Final = 64 * 1024


@dataclass(frozen=True, slots=True)
class FileVersion:
    """One side of a change; ``text`` is None when it is binary or was too big to keep."""

    size: int
    lines: int
    binary: bool
    text: str | None

    @classmethod
    def of_text(cls, text: str, keep: int) -> FileVersion:
        """A version of text already decoded (the model's content, an editor buffer)."""
        data = text.encode("utf-8", errors="surrogatepass")
        binary = "\0" in text
        kept = text if len(data) <= keep and not binary else None
        return cls(size=len(data), lines=_count_lines(data), binary=binary, text=kept)


def _count_lines(data: bytes) -> int:
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def scan_file(handle: BinaryIO, keep: int, compare: bytes) -> tuple[FileVersion, bool]:
    """Read ``handle`` from the start: its version (text kept up to ``keep`` bytes) and
    whether its bytes equal ``compare``.

    Memory stays at ``keep`` plus one block however large the file is.
    """
    handle.seek(0)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
    size = newlines = 0
    binary = False
    same = True
    last = b""
    kept = bytearray()
    while block := handle.read(_BLOCK):
        if same:
            same = compare[size : size + len(block)] == block
        if not binary:
            try:
                decoder.decode(block, final=False)
            except UnicodeDecodeError:
                binary = True
            binary = binary or b"\0" in block
        if size + len(block) <= keep:
            kept += block
        size += len(block)
        newlines += block.count(b"\n")
        last = block[-1:]
    if not binary:
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            binary = True
    lines = newlines + (1 if size and last != b"\n" else 0)
    text = kept.decode("utf-8") if size <= keep and not binary else None
    return FileVersion(size=size, lines=lines, binary=binary, text=text), same and size == len(
        compare
    )


def _describe(version: FileVersion) -> str:
    kind = "binary, " if version.binary else ""
    noun = "line" if version.lines == 1 else "lines"
    return f"{kind}{version.size} bytes, {version.lines} {noun}"


def omitted_reason(old: FileVersion | None, new: FileVersion, cap: int) -> str | None:
    """Why the diff cannot be shown, or None when it can."""
    if new.binary or (old is not None and old.binary):
        return "diff omitted: binary content (NUL bytes or invalid UTF-8) is not shown"
    total = new.size + (old.size if old is not None else 0)
    if total > cap or new.text is None or (old is not None and old.text is None):
        return f"diff omitted: {max(total - cap, 0)} bytes over the {cap}-byte cap"
    return None


def change_content(
    path: Path | str, old: FileVersion | None, new: FileVersion, cap: int
) -> dict[str, Any]:
    """The card content for a write: a diff, or a summary when the diff may not be shown."""
    reason = omitted_reason(old, new, cap)
    if reason is None:
        assert new.text is not None
        return diff_content(path, old.text if old is not None else None, new.text)
    if old is None:
        summary = f"Created {path}: {_describe(new)}; {reason}."
    else:
        summary = f"Updated {path}: {_describe(new)} (was {_describe(old)}); {reason}."
    return text_content(summary)
