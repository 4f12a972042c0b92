"""Which folder may import which: the ladder from the messages up to the hosts.

- ``messages/`` is the vocabulary everything else shares: it imports nothing of ours, so a
  worker process, a daemon or a remote host that exchanges messages needs nothing else to
  decode them.
- The kernel (``actors/``, ``runtime/kernel``, ``runtime/providers``, ``runtime/tools``,
  ``runtime/mcp``) runs a session whoever hosts it: it imports no hosting module (the
  in-process host and its assembly, the process settings, the daemon, the workers, the Ray
  host, the CLI, the ACP connection).
- Every module of ``runtime/`` belongs to the kernel, the store or the hosting: none is left
  loose where no rule sees it.
- The store (``runtime/store``) is below the hosts that use it: no hosting module either.
- The installed package never imports ``toolprep.testing`` (the test kit: the loopback
  provider and its SSE builders), the tests or the benchmarks.
- The tests never import the benchmarks, nor the benchmarks the tests: what both need lives
  in ``toolprep.testing`` (a test kit only), and a benchmark is tested by running it as a
  command.

An import that breaks a rule today and needs more than a small change is listed in
``ALLOWED`` with the reason; an entry that no longer matches an import fails too, so the
list only shrinks.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

HOSTING = (
    "toolprep.runtime.hosting",
    "toolprep.runtime.process",
    "toolprep.runtime.daemon",
    "toolprep.runtime.workers",
    "toolprep.runtime.ray_host",
    "toolprep.runtime.cli",
    "toolprep.runtime.acp",
    "toolprep.runtime.telemetry",
)
KERNEL = (
    "actors",
    "runtime/kernel",
    "runtime/providers",
    "runtime/tools",
    "runtime/mcp",
)
STORE = ("runtime/store",)
PACKAGE = ("messages", "actors", "runtime", "toolprep")


@dataclass(frozen=True)
class Rule:
    """Modules under ``folders`` import no module under ``forbidden`` unless under ``except_``."""

    name: str
    folders: tuple[str, ...]
    forbidden: tuple[str, ...]
    except_: tuple[str, ...] = ()


RULES = (
    Rule("messages import nothing of ours", ("messages",), ("toolprep",), ("toolprep.messages",)),
    Rule(
        "the kernel imports no hosting module",
        KERNEL,
        HOSTING,
    ),
    Rule("the store imports no hosting module", STORE, HOSTING),
    Rule(
        "the package imports no test or benchmark code",
        PACKAGE,
        ("toolprep.testing", "tests", "benchmarks"),
    ),
    Rule("the tests import no benchmarks", ("tests",), ("benchmarks",)),
    Rule("the benchmarks import no tests", ("benchmarks",), ("tests",)),
)

ALLOWED: dict[tuple[str, str], str] = {}
"""(file, module) -> why the import is still there."""


def _imports(module: Path) -> Iterator[str]:
    """Every module ``module`` imports, at the top or inside a function."""
    for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"), filename=str(module))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            yield node.module


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _sources(folder: str) -> list[Path]:
    root = REPO / folder
    files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
    assert files, f"{folder}: no Python files; the rule checks nothing"
    return files


def _breaches(rule: Rule) -> set[tuple[str, str]]:
    return {
        (path.relative_to(REPO).as_posix(), name)
        for folder in rule.folders
        for path in _sources(folder)
        for name in _imports(path)
        if _under(name, rule.forbidden) and not _under(name, rule.except_)
    }


@pytest.mark.parametrize("rule", RULES, ids=[rule.name for rule in RULES])
def test_rule_holds_but_for_the_allowed_imports(rule: Rule) -> None:
    breaches = {b for b in _breaches(rule) if b not in ALLOWED}

    assert not breaches, f"{rule.name}: " + ", ".join(f"{f} imports {m}" for f, m in breaches)


def test_every_allowed_import_is_still_there() -> None:
    found = {b for rule in RULES for b in _breaches(rule)}

    assert set(ALLOWED) <= found, f"remove from ALLOWED: {sorted(set(ALLOWED) - found)}"


def test_the_walk_sees_imports_at_the_top_and_inside_functions() -> None:
    """A rule that holds because the walk saw nothing would pass on any tree."""
    probe = Rule(
        "probe", ("runtime/daemon/server.py", "runtime/cli/hosting.py"), ("toolprep.runtime",)
    )

    assert {
        ("runtime/daemon/server.py", "toolprep.runtime.acp.agent"),  # at the top
        ("runtime/cli/hosting.py", "toolprep.runtime.workers"),  # inside a function
    } <= _breaches(probe)


def test_every_runtime_module_is_kernel_store_or_hosting() -> None:
    """A module outside every list would be checked by no rule."""
    hosting = {"runtime/" + name.removeprefix("toolprep.runtime.") for name in HOSTING}
    kernel = {folder for folder in KERNEL if folder.startswith("runtime/")}
    placed = kernel | set(STORE) | hosting
    runtime = REPO / "runtime"
    entries = {
        path.relative_to(REPO).as_posix()
        for path in runtime.iterdir()
        if (path.is_dir() and (path / "__init__.py").exists())
        or (path.suffix == ".py" and path.name != "__init__.py")
    }

    assert entries - placed == set(), "place these in KERNEL, STORE or HOSTING"
    assert placed - entries == set(), "these are listed but do not exist"
