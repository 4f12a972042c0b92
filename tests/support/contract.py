"""What a compatibility module's contract test says when an upgrade breaks it.

Every private part of a dependency the package uses lives in one ``*_compat`` module,
and each such module has a contract test that builds the real objects of the installed
dependency and checks what the module relies on. A failure must say at once which
dependency and which version broke it, and where the fix goes.
"""

from __future__ import annotations

from importlib.metadata import version

__all__ = ["broken"]


def broken(distribution: str, compat_module: str, what: str, *, installed: str = "") -> str:
    """The assertion message: ``distribution``'s installed version no longer offers ``what``.

    ``installed`` names the version when it is not a distribution's (Python's own).
    """
    installed = installed or version(distribution)
    return (
        f"{distribution} {installed} (installed) breaks {compat_module}: {what}. "
        f"Adapt {compat_module} to this version, or keep {distribution} at a version it supports."
    )
