"""Confinement of tool paths to the session's working directory.

The model chooses the paths, so every file tool goes through ``resolve_path``
before touching the disk. A path is accepted only if both its lexical form
(after joining with cwd and collapsing ``..``) and its real form (after
following every symlink, including symlinked parent directories and dangling
links) stay inside cwd. Checking the real form is what stops a link planted
inside the project from reaching ``/etc``; checking the lexical form gives the
model a precise message for the common ``../`` mistake.

That check happens before the operation, so on its own it could be raced by
swapping a directory for a symlink in between. The file tools therefore open
what they read and write through ``confined_fs``, which walks
``relative_parts`` from a descriptor of the root without following any link
it has not checked; ``resolve_path`` stays as the early, well-worded refusal.
"""

from __future__ import annotations

import os
from pathlib import Path

from toolprep.runtime.tools.base import ToolError


def session_root(cwd: Path | str) -> Path:
    """The absolute, normalised form of cwd (symlinks in cwd itself are kept)."""
    return Path(os.path.normpath(os.path.abspath(cwd)))


def is_within(path: str, root: str) -> bool:
    """True if ``path`` equals ``root`` or lies below it (both already normalised)."""
    if path == root:
        return True
    prefix = root if root.endswith(os.sep) else root + os.sep
    return path.startswith(prefix)


def lexical_path(path: str, cwd: Path | str) -> Path:
    """Join ``path`` onto cwd and collapse ``.``/``..`` without touching the disk."""
    root = session_root(cwd)
    return Path(os.path.normpath(os.path.join(root, path)))


def _confined_lexical(path: str, root: Path) -> Path:
    """The lexical form of ``path`` under ``root``; ToolError if it is not a usable path there."""
    if not isinstance(path, str) or not path.strip():
        raise ToolError("path must be a non-empty string")
    if "\0" in path:
        raise ToolError(f"path {path!r} contains a NUL byte")
    candidate = lexical_path(path, root)
    lexical = str(candidate)
    if not (is_within(lexical, str(root)) or is_within(lexical, os.path.realpath(root))):
        if os.path.isabs(path):
            raise ToolError(f"path {path!r} is outside the session directory {root}")
        raise ToolError(f"path {path!r} escapes the session directory {root} via '..'")
    return candidate


def resolve_path(path: str, cwd: Path | str) -> Path:
    """Return the absolute path for ``path`` after checking it stays inside cwd.

    The result is the lexical path (symlinks not expanded), which is what the
    editor knows the file as. Raises ToolError naming the path otherwise.
    Opening the result by name is still open to a symlink swap; the file
    tools open through ``confined_fs`` instead.
    """
    root = session_root(cwd)
    candidate = _confined_lexical(path, root)
    try:
        real = os.path.realpath(candidate)
    except OSError as exc:  # a link on the way replaced while being read
        raise ToolError(
            f"path {path!r} changed while being checked ({exc.strerror}); try again"
        ) from None
    if not is_within(real, os.path.realpath(root)):
        raise ToolError(
            f"path {path!r} resolves through a symlink to {real}, "
            f"outside the session directory {root}"
        )
    return candidate


def relative_parts(path: str, cwd: Path | str) -> tuple[str, ...]:
    """The components of ``path`` below the session root, for a walk from the root's descriptor.

    Only the lexical check is made here (ToolError if ``path`` leaves cwd by
    ``..`` or is absolute elsewhere); symlinks are the walk's business. An
    absolute path may name cwd by its real location when cwd itself is a
    symlink, so both forms of the root are accepted.
    """
    root = session_root(cwd)
    candidate = str(_confined_lexical(path, root))
    base = str(root) if is_within(candidate, str(root)) else os.path.realpath(root)
    relative = os.path.relpath(candidate, base)
    return () if relative == "." else tuple(relative.split(os.sep))


def is_confined(path: Path | str, cwd: Path | str) -> bool:
    """Whether an existing path (e.g. found by walking) really lies inside cwd."""
    real_root = os.path.realpath(session_root(cwd))
    return is_within(os.path.realpath(path), real_root)


def display_path(path: str | Path, cwd: Path | str) -> str:
    """A short form for titles: relative to cwd when inside it, else as given.

    Never raises and never touches the disk, because titles are computed for
    cards whose arguments may still be incomplete or invalid.
    """
    text = str(path)
    if not text:
        return text
    try:
        root = session_root(cwd)
        full = lexical_path(text, root)
    except (TypeError, ValueError):
        return text
    if is_within(str(full), str(root)):
        rel = os.path.relpath(full, root)
        return "." if rel == "." else rel
    return text


def title_path(raw: str) -> str:
    """How a card title names a path the model gave, without knowing the session cwd.

    Relative paths are normalised (``./src//a.py`` -> ``src/a.py``); absolute
    ones are shown as given, since only the session knows what they are relative to.
    """
    if os.path.isabs(raw):
        return raw
    return os.path.normpath(raw)
