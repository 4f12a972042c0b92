"""A model route: one step of a session's model fallback chain.

A plain value beside the providers it names, so that the actors, the ``Runtime`` and an
embedder build and read routes without importing anything of the hosting (which turns the
command line and the environment into routes: ``runtime.hosting.model_routes``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from toolprep.runtime.providers.context_windows import context_window

if TYPE_CHECKING:
    from toolprep.runtime.providers.base import Provider

__all__ = ["ModelRoute"]


@dataclass(frozen=True, slots=True)
class ModelRoute:
    """One step of the model fallback chain: which provider, which model, and how many
    tokens its context holds (None: looked up by name, ``context_windows``).

    A plain value, kept out of the actors so that an embedder builds routes without
    importing any of them."""

    provider: Provider
    model: str
    context_window: int | None = None

    @property
    def window(self) -> int:
        return self.context_window or context_window(self.model)
