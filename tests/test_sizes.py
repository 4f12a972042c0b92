"""No class of the product over 400 lines and no module over 600.

A module that grows past that holds more than one job, and a class past it more than
one part: each is split along its seams into modules with one job each (``WorkerHost``
and ``Runtime`` show how). The product is what is installed: ``messages/``, ``actors/``,
``runtime/``, ``toolprep/`` and ``testing/``.

A module being split right now is listed in ``ALLOWED`` with the reason, which exempts
it and its classes; an entry that no longer offends fails too, so the list only shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PRODUCT = ("messages", "actors", "runtime", "toolprep", "testing")
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 400

ALLOWED: dict[str, str] = {}


def _modules() -> list[Path]:
    return sorted(path for folder in PRODUCT for path in (REPO / folder).rglob("*.py"))


def _name(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def _module_lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _classes(path: Path) -> list[tuple[str, int]]:
    """Each class of ``path`` (nested ones too) and its lines, decorators included."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            end = node.end_lineno if node.end_lineno is not None else node.lineno
            found.append((node.name, end - first + 1))
    return found


def _offences(path: Path) -> list[str]:
    """What of ``path`` is over its limit, said with the sizes."""
    name = _name(path)
    offences = []
    lines = _module_lines(path)
    if lines > MAX_MODULE_LINES:
        offences.append(f"{name}: {lines} lines (at most {MAX_MODULE_LINES} a module)")
    for cls, size in _classes(path):
        if size > MAX_CLASS_LINES:
            offences.append(f"{name}: class {cls} {size} lines (at most {MAX_CLASS_LINES})")
    return offences


def test_the_product_is_found() -> None:
    names = {_name(path) for path in _modules()}
    assert "runtime/hosting/runtime.py" in names
    assert set(ALLOWED) <= names, f"no such module: {sorted(set(ALLOWED) - names)}"


def test_no_product_module_or_class_is_over_its_limit() -> None:
    offences = [o for path in _modules() if _name(path) not in ALLOWED for o in _offences(path)]
    assert not offences, "split these along their seams:\n" + "\n".join(offences)


def test_every_allowed_module_still_offends() -> None:
    fixed = [name for name in ALLOWED if not _offences(REPO / name)]
    assert not fixed, f"remove from ALLOWED (within the limits now): {fixed}"
