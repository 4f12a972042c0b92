"""Building frozen, slotted dataclasses without their ``__init__``: Python's own internals, here.

A frozen dataclass's generated ``__init__`` sets each field through
``object.__setattr__``. With ``slots=True`` each field is a member descriptor on the
class, whose ``__set__`` stores the value directly at about half the cost; ``chunks``
builds the per-delta chunk objects that way. That relies on how CPython lays out a
slotted dataclass, which no documentation promises, so it is reached only through this
module: ``slot_setters`` resolves the descriptors once, at import of the caller, and
``allocate`` is ``object.__new__`` itself, so a chunk pays no extra call.
``tests/providers/test_dataclass_compat_contract.py`` builds real instances and fails,
naming the Python version, if a new Python changes what this relies on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import MemberDescriptorType
from typing import Any

__all__ = ["SlotSetter", "allocate", "slot_setters"]

SlotSetter = Callable[[Any, Any], None]
"""Sets one field of an instance: ``setter(instance, value)``."""

allocate = object.__new__
"""An instance of a class with no field set yet (``allocate(cls)``); set every field next."""


def slot_setters(cls: type, names: tuple[str, ...]) -> tuple[SlotSetter, ...]:
    """The setters of ``cls``'s fields ``names``, which must be all its fields, in order.

    Raises ``TypeError`` when they are not (the class changed: update the caller) or when
    a field is not a slot (the class is no longer ``slots=True``).
    """
    actual = tuple(f.name for f in dataclasses.fields(cls))
    if actual != names:
        raise TypeError(f"{cls.__name__} fields are {actual}, expected {names}")
    setters: list[SlotSetter] = []
    for name in names:
        descriptor = cls.__dict__.get(name)
        if not isinstance(descriptor, MemberDescriptorType):
            raise TypeError(f"{cls.__name__}.{name} is not a slot: is the class slots=True?")
        setters.append(descriptor.__set__)
    return tuple(setters)
