"""Which folder may import which: messages are the vocabulary everything else shares.

``messages/`` must not depend on ``actors/`` or ``runtime/``: a worker process, a daemon or
a remote host that exchanges these messages should need nothing else to decode them.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _imports(module: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(module.read_text(), filename=str(module))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names.add(node.module)
    return names


def test_messages_import_only_messages_and_the_standard_library() -> None:
    offenders = {
        f"{module.name}: {name}"
        for module in (REPO / "messages").glob("*.py")
        for name in _imports(module)
        if name.startswith("toolprep.") and not name.startswith("toolprep.messages")
    }
    assert not offenders
    assert (REPO / "messages" / "turns.py").is_file()  # the walk saw the real folder


def test_the_store_imports_nothing_of_the_workers() -> None:
    """The store and the workers share the message codec in ``messages``, not each other."""
    offenders = {
        f"{module.name}: {name}"
        for module in (REPO / "runtime" / "store").glob("*.py")
        for name in _imports(module)
        if name.startswith("toolprep.runtime.workers")
    }
    assert not offenders
    assert (REPO / "runtime" / "store" / "session_store.py").is_file()
