"""Transient tool-call preparation metadata, attached to chunks by identity.

Preparations tell the ACP layer "a tool call with this id and name is being
generated" before its arguments exist. They must never become a Part or a
field of a response, or history assembly and serialisation would see them.
So they live in a side table keyed by the *identity* of the response object:
two equal empty chunks are different keys, and an entry disappears when its
chunk is garbage collected.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

from toolprep.messages.content import GenerateContentResponse


@dataclass(frozen=True, slots=True)
class ToolCallPreparation:
    call_id: str
    tool_name: str


class _IdentityWeakMap:
    """A weak-key map that compares keys by ``is``, not ``==``.

    ``weakref.WeakKeyDictionary`` hashes and compares keys by value, which
    would make two equal chunks share one entry.
    """

    __slots__ = ("_entries", "_lock")

    def __init__(self) -> None:
        self._entries: dict[
            int, tuple[weakref.ref[GenerateContentResponse], tuple[ToolCallPreparation, ...]]
        ] = {}
        self._lock = threading.Lock()

    def set(self, key: GenerateContentResponse, value: tuple[ToolCallPreparation, ...]) -> None:
        key_id = id(key)

        def forget(_ref: weakref.ref[GenerateContentResponse], key_id: int = key_id) -> None:
            with self._lock:
                entry = self._entries.get(key_id)
                if entry is not None and entry[0] is _ref:
                    del self._entries[key_id]

        with self._lock:
            self._entries[key_id] = (weakref.ref(key, forget), value)

    def get(self, key: GenerateContentResponse) -> tuple[ToolCallPreparation, ...]:
        entry = self._entries.get(id(key))
        if entry is None or entry[0]() is not key:
            return ()
        return entry[1]

    def __len__(self) -> int:
        return len(self._entries)


_store = _IdentityWeakMap()


def set_preparations(
    response: GenerateContentResponse,
    preparations: tuple[ToolCallPreparation, ...] | list[ToolCallPreparation],
) -> None:
    """Attach preparations to ``response`` (replacing any already attached)."""
    _store.set(response, tuple(preparations))


def get_preparations(response: GenerateContentResponse) -> tuple[ToolCallPreparation, ...]:
    """Preparations attached to this exact object; empty when there are none."""
    return _store.get(response)


def tracked_response_count() -> int:
    """How many live responses carry preparations (for leak checks)."""
    return len(_store)
