"""Paths the file tools refuse: the agent's data directory and the usual credential files.

The file tools are confined to the session directory, but that directory may be
the user's home, or hold the data directory (session transcripts, the serve
token in ``serve.json``). So ``read_file``, ``write_file``, ``list_directory``,
``glob`` and ``search`` refuse a path inside one of these, naming it, and their
walks pass over them without a word: what a hidden directory holds is never
read, and its name alone gives nothing away beyond its existence.

``CREDENTIAL_PATHS`` is also the list the sandbox hides from commands and MCP
servers (``runtime/tools/sandbox.py``): SSH keys, cloud and cluster credentials,
registry logins, netrc-style password files and keyrings, all below the home
directory. One list, so a file a tool may not read is never one a command can.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CREDENTIAL_PATHS", "HiddenPaths"]

CREDENTIAL_PATHS: tuple[str, ...] = (
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".config/containers/auth.json",
    ".netrc",
    ".git-credentials",
    ".config/git/credentials",
    ".config/gh",
    ".pgpass",
    ".my.cnf",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials.toml",
    ".terraform.d/credentials.tfrc.json",
    ".password-store",
    ".local/share/keyrings",
)
"""Below the home directory: files and directories that hold credentials."""


@dataclass(frozen=True, slots=True)
class HiddenPaths:
    """Absolute, symlink-resolved paths no file tool reads, writes or lists."""

    roots: tuple[str, ...] = ()

    @classmethod
    def for_agent(cls, *, data_dir: str | None, home: str | None = None) -> HiddenPaths:
        """The data directory (if any) and ``CREDENTIAL_PATHS`` below ``home`` (default:
        ``$HOME``, else the user's home)."""
        home = home or os.environ.get("HOME") or str(Path.home())
        paths: list[str] = [os.path.join(home, rel) for rel in CREDENTIAL_PATHS]
        if data_dir:
            paths.append(str(Path(data_dir).expanduser()))
        return cls.of(paths)

    @classmethod
    def of(cls, paths: Iterable[str]) -> HiddenPaths:
        roots = {os.path.realpath(os.path.abspath(path)) for path in paths}
        return cls(tuple(sorted(roots)))

    def covering(self, path: str) -> str | None:
        """The hidden root that ``path`` (absolute, symlinks resolved) is or lies in."""
        for root in self.roots:
            if path == root or path.startswith(root.rstrip(os.sep) + os.sep):
                return root
        return None

    def refusal(self, tool: str, raw: str, cwd: Path) -> str | None:
        """Why ``tool`` may not touch ``raw`` (relative to ``cwd``), or None if it may."""
        if not self.roots:
            return None
        real = os.path.realpath(os.path.join(cwd, raw))
        root = self.covering(real)
        if root is None:
            return None
        return (
            f"{tool}: {raw!r} is inside {root}, which holds credentials or the agent's own "
            "data and is kept from tools; ask the user for what you need from it"
        )
