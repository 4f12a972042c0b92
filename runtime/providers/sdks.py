"""Which SDK each real provider is built on, and whether it could be built: no SDK import.

Kept apart from ``factory`` so that the CLI can refuse settings no provider
could be built from before anything heavy is loaded, and ``DeferredProvider``
knows which module to import in the background.
"""

from __future__ import annotations

import os
from typing import Final

__all__ = ["SDK_MODULES", "check_provider_key"]

SDK_MODULES: Final[dict[str, str]] = {"anthropic": "anthropic", "openai": "openai"}
"""The module each provider's SDK client comes from, imported when it is built."""


def check_provider_key(name: str, *, api_key: str | None, base_url: str | None) -> None:
    """Raise ``ValueError`` for a provider that could not be built: an unknown name, or
    OpenAI's default endpoint without a key (a compatible server may take none)."""
    if name not in SDK_MODULES:
        raise ValueError(f"unknown provider {name!r}: use anthropic or openai")
    if name == "openai" and not (api_key or os.environ.get("OPENAI_API_KEY")) and base_url is None:
        raise ValueError(
            "the openai provider needs OPENAI_API_KEY (or --base-url for a "
            "compatible server that takes no key)"
        )
