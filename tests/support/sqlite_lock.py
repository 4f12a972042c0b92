"""Another process's hold on a session database: its write lock, for as long as a test needs."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

__all__ = ["write_locked"]


@contextlib.contextmanager
def write_locked(db: Path) -> Iterator[None]:
    """A connection of its own holds ``db``'s write lock (``BEGIN IMMEDIATE``) inside."""
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            other.execute("ROLLBACK")
