"""The contract of ``runtime/providers/dataclass_compat.py`` with the running Python.

Frozen, slotted dataclasses built through their member descriptors must be the very
instances their constructor builds: equal, hashed alike, still frozen, every field
set. A Python that lays such classes out differently fails here, naming its version.
"""

from __future__ import annotations

import dataclasses
import platform

import pytest

from tests.support.contract import broken
from toolprep.runtime.providers.dataclass_compat import allocate, slot_setters

COMPAT = "runtime/providers/dataclass_compat.py"
PYTHON = platform.python_version()


@dataclasses.dataclass(frozen=True, slots=True)
class _Pair:
    left: str
    right: tuple[int, ...] | None = None


@dataclasses.dataclass(frozen=True)
class _Unslotted:
    left: str


def _says(what: str) -> str:
    return broken("Python", COMPAT, what, installed=PYTHON)


def test_an_instance_built_through_the_slots_is_the_constructors_instance() -> None:
    set_left, set_right = slot_setters(_Pair, ("left", "right"))

    built = allocate(_Pair)
    set_left(built, "a")
    set_right(built, (1, 2))

    assert type(built) is _Pair, _says(f"object.__new__ gave a {type(built).__name__}")
    assert built == _Pair("a", (1, 2)), _says(f"{built!r} differs from the constructor's")
    assert hash(built) == hash(_Pair("a", (1, 2))), _says("the built instance hashes otherwise")
    assert dataclasses.astuple(built) == ("a", (1, 2)), _says("a field was left unset")
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.left = "b"  # type: ignore[misc]


def test_a_changed_field_list_or_a_class_without_slots_is_refused() -> None:
    with pytest.raises(TypeError, match=r"_Pair fields are \('left', 'right'\)"):
        slot_setters(_Pair, ("left",))
    with pytest.raises(TypeError, match="not a slot"):
        slot_setters(_Unslotted, ("left",))
