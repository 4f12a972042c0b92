"""Where each session runs, kept in a named, detached Ray actor anyone on the cluster can ask.

The front routes by its own table (no cluster round trip per call); this
actor is the cluster-wide copy of it: session id -> shard slot, and slot ->
the shard actor serving it now. Another front, an operator's script or a
drill finds a session's shard here by id (``locate``). The actor is detached
so it outlives any one front; a front starting under the same name clears
what a predecessor left.
"""

from __future__ import annotations

from typing import Any, cast

import ray

__all__ = [
    "NAMESPACE",
    "Placements",
    "PlacementsActor",
    "RegistryLog",
    "locate",
    "open_registry",
    "registry_name",
]

NAMESPACE = "toolprep"


def registry_name(name: str) -> str:
    return f"{name}-sessions"


class Placements:
    """The registry's state; ``PlacementsActor`` is the class Ray creates."""

    def __init__(self) -> None:
        self._slots: dict[str, int] = {}
        self._shards: dict[int, Any] = {}

    def reset(self) -> None:
        self._slots.clear()
        self._shards.clear()

    def shard_started(self, slot: int, shard: Any) -> None:
        """``shard`` is the actor handle now serving ``slot``."""
        self._shards[slot] = shard

    def placed(self, session_id: str, slot: int) -> None:
        self._slots[session_id] = slot

    def forgot(self, session_id: str) -> None:
        self._slots.pop(session_id, None)

    def locate(self, session_id: str) -> tuple[int, Any] | None:
        """The session's slot and the shard actor serving it, or None if it is not open."""
        slot = self._slots.get(session_id)
        if slot is None:
            return None
        return slot, self._shards.get(slot)

    def load(self) -> dict[int, int]:
        """Open sessions per slot."""
        counts = dict.fromkeys(self._shards, 0)
        for slot in self._slots.values():
            counts[slot] = counts.get(slot, 0) + 1
        return counts


PlacementsActor = ray.remote(num_cpus=0)(Placements)


class RegistryLog:
    """The front's ``PlacementLog``: every placement sent to the registry actor without
    waiting for it (one caller's calls to an actor run in the order they were sent)."""

    def __init__(self, registry: Any) -> None:
        self._registry = registry

    def placed(self, session_id: str, slot: int) -> None:
        self._registry.placed.remote(session_id, slot)

    def forgot(self, session_id: str) -> None:
        self._registry.forgot.remote(session_id)


def open_registry(name: str) -> Any:
    """The registry actor of the front called ``name``, created on first use."""
    return PlacementsActor.options(
        name=registry_name(name), namespace=NAMESPACE, lifetime="detached", get_if_exists=True
    ).remote()


def locate(
    session_id: str, name: str = "toolprep", timeout: float = 30.0
) -> tuple[int, Any] | None:
    """Ask the cluster where ``session_id`` runs: its slot and shard actor (needs ``ray.init``)."""
    registry = ray.get_actor(registry_name(name), namespace=NAMESPACE)
    return cast(
        "tuple[int, Any] | None", ray.get(registry.locate.remote(session_id), timeout=timeout)
    )
