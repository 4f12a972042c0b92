"""The package's declared dependencies: every one it imports is declared, every one capped.

A module imported directly but reached only through another dependency works until that
dependency drops it; an uncapped dependency lets a major release break an install that
worked. Both are read from ``pyproject.toml`` and the package's own imports.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE_FOLDERS = ("messages", "actors", "runtime", "toolprep", "testing")
_NAME = re.compile(r"^[A-Za-z0-9._-]+")


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements() -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project.get("optional-dependencies", {})
    return [*project["dependencies"], *(r for group in extras.values() for r in group)]


def _declared() -> set[str]:
    names = set()
    for requirement in _requirements():
        match = _NAME.match(requirement)
        assert match is not None, requirement
        names.add(_normalized(match.group(0)))
    return names


def _top_level_imports() -> Iterator[tuple[str, str]]:
    for folder in PACKAGE_FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    yield path.relative_to(REPO).as_posix(), name.split(".")[0]


def test_every_third_party_module_the_package_imports_is_declared() -> None:
    distributions = importlib.metadata.packages_distributions()
    declared = _declared()
    undeclared = set()
    for where, top in _top_level_imports():
        if top in sys.stdlib_module_names or top in ("toolprep", "__future__"):
            continue
        owners = {_normalized(d) for d in distributions.get(top, [])}
        assert owners, f"{where} imports {top}, which no installed distribution provides"
        if not owners & declared:
            undeclared.add((where, top, ", ".join(sorted(owners))))

    assert not undeclared, "declare in pyproject.toml: " + "; ".join(
        f"{where} imports {top} (from {owner})" for where, top, owner in sorted(undeclared)
    )


def test_every_dependency_is_capped_below_its_next_major() -> None:
    # An extra that needs another of this project's extras names the project itself
    # (``toolprep[telemetry]``): those packages are capped where that extra lists them.
    uncapped = [
        r
        for r in _requirements()
        if not r.startswith("toolprep[") and not re.search(r"(<\s*[0-9]|~=\s*[0-9]+\.[0-9]+)", r)
    ]

    assert not uncapped, f"cap these below their next major: {uncapped}"
