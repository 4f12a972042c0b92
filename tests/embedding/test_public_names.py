"""The public surface is ``toolprep.__all__`` (README, "Embed it"): each name there exists
and says what it is in a docstring of its own, read from its definition's source (so a
dataclass's generated signature or an inherited docstring does not count)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import toolprep


def _source(name: str) -> str:
    """The source of the module that defines ``name``: where ``toolprep`` loads it from, or
    ``toolprep`` itself."""
    homes: dict[str, str] = toolprep._HOMES
    spec = importlib.util.find_spec(homes.get(name, "toolprep"))
    assert spec is not None and spec.origin is not None, name
    return Path(spec.origin).read_text(encoding="utf-8")


def _assigned(node: ast.stmt, name: str) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else []
    if isinstance(node, ast.AnnAssign):
        targets = [node.target]
    return any(isinstance(target, ast.Name) and target.id == name for target in targets)


def _docstring(source: str, name: str) -> str | None:
    """The docstring of the top-level definition of ``name`` in ``source``: a class's or
    function's own, or the string that follows an assignment."""
    body = ast.parse(source).body
    for node, following in zip(body, [*body[1:], None], strict=True):
        if isinstance(node, ast.ClassDef | ast.FunctionDef) and node.name == name:
            return ast.get_docstring(node)
        if _assigned(node, name) and isinstance(following, ast.Expr):
            value = following.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                return value.value
    return None


def test_each_public_name_exists_and_has_a_docstring() -> None:
    missing = [name for name in toolprep.__all__ if not hasattr(toolprep, name)]
    undocumented = [
        name for name in toolprep.__all__ if not (_docstring(_source(name), name) or "").strip()
    ]

    assert not missing, f"in toolprep.__all__ but not importable: {missing}"
    assert not undocumented, f"in toolprep.__all__ without a docstring: {undocumented}"


def test_the_serving_functions_are_public() -> None:
    assert {"serve_stdio", "serve_websocket"} <= set(toolprep.__all__)


def test_the_docstring_reader_tells_a_documented_name_from_an_undocumented_one() -> None:
    """A reader that found every name documented would make the first test pass on any tree."""
    source = (
        "class Said:\n    '''Said.'''\n\n"
        "class Bare:\n    x: int\n\n"
        "NAMED = 1\n'''Named.'''\n\n"
        "UNNAMED = 2\n\n"
        "def told() -> None:\n    '''Told.'''\n"
    )

    found = {name: _docstring(source, name) for name in ("Said", "Bare", "NAMED", "UNNAMED")}

    assert found == {"Said": "Said.", "Bare": None, "NAMED": "Named.", "UNNAMED": None}
    assert _docstring(source, "told") == "Told."
