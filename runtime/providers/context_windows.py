"""How many tokens a model's context holds, for the ``usage_update`` the editor shows.

Providers do not report it with a response, so it is looked up by model-name
prefix (longest first, so ``gpt-4o`` wins over ``gpt-4``). A model not listed,
such as one served locally, gets ``DEFAULT_CONTEXT_WINDOW``; its route can say
better (``ModelRoute.context_window``, ``--context-window``).
"""

from __future__ import annotations

__all__ = ["DEFAULT_CONTEXT_WINDOW", "context_window"]

DEFAULT_CONTEXT_WINDOW = 128_000

_BY_PREFIX: dict[str, int] = {
    "claude-": 200_000,
    "gpt-5": 400_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "o1": 200_000,
    "o3": 200_000,
    "o4": 200_000,
}
_PREFIXES = sorted(_BY_PREFIX, key=len, reverse=True)


def context_window(model: str) -> int:
    """The context size of ``model`` in tokens: its longest known prefix's, else the default."""
    name = model.rsplit("/", 1)[-1]  # "openai/gpt-4o" on a router names the same model
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            return _BY_PREFIX[prefix]
    return DEFAULT_CONTEXT_WINDOW
