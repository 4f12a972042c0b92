"""What a running daemon's sessions stream from, published without its secret.

A daemon's provider, model, base URL and key come from the options and the
environment of the process that started ``toolprep serve``; a later
``toolprep connect`` cannot change them, and used to join a daemon on other
settings without a word. So the daemon publishes what it runs with in its
``serve.json`` (``RunsWith``), and ``connect`` compares it with what its own
options and environment ask for (``Asked``), saying what differs and how to
get what it asked for.

The key itself never leaves the daemon: it publishes only an HMAC of it
keyed with its own random token (``key_check``). A client that already
holds the token computes the same HMAC of its own key and learns only
whether both keys are the same; the value is useless to anyone else, and
two daemons' values for one key have nothing in common.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

from toolprep.runtime.hosting.model_routes import KEY_VARIABLES, ProviderConfig

__all__ = ["Asked", "RunsWith", "differences", "key_check"]


def key_check(key: str, token: str) -> str:
    """The HMAC-SHA256 of ``key`` keyed with the daemon's ``token``, hex: equal keys, equal
    checks, and nothing else to learn from it."""
    return hmac.new(token.encode(), key.encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class RunsWith:
    """The provider settings a daemon runs with; ``key_check`` is None when it has no key."""

    provider: str
    model: str
    base_url: str | None
    key_check: str | None

    @classmethod
    def of(cls, settings: ProviderConfig, token: str) -> RunsWith:
        check = key_check(settings.api_key, token) if settings.api_key else None
        return cls(settings.provider, settings.model, settings.base_url, check)

    def to_json(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "model": self.model,
            "base_url": self.base_url,
            "key_check": self.key_check,
        }

    @classmethod
    def from_json(cls, data: object) -> RunsWith | None:
        """None for anything else than what ``to_json`` writes (a daemon file of an older
        toolprep has no such entry: nothing is compared then)."""
        match data:
            case {"provider": str(provider), "model": str(model), **rest}:
                base_url, check = rest.get("base_url"), rest.get("key_check")
                if isinstance(base_url, str | None) and isinstance(check, str | None):
                    return cls(provider, model, base_url, check)
        return None


@dataclass(frozen=True, slots=True)
class Asked:
    """What a ``connect`` asks for: the settings its options after ``--`` and its
    environment would start a daemon with, and which of them it said anything about.

    Only those count: an editor whose environment holds no key and whose command line
    names no provider asks for nothing, whatever a daemon it joins runs with.
    """

    settings: ProviderConfig
    provider_named: bool
    """``--provider``, or a provider key in the environment (which picks the default)."""
    model_named: bool
    base_url_named: bool


def differences(daemon: RunsWith, asked: Asked, token: str) -> list[str]:
    """What the daemon runs with that differs from what ``asked`` asks for, in words;
    empty when nothing differs. Never a key, only whether it differs."""
    wanted = asked.settings
    if asked.provider_named and wanted.provider != daemon.provider:
        return [f"provider {wanted.provider} (the daemon runs {daemon.provider})"]
    found: list[str] = []
    if asked.model_named and wanted.model != daemon.model:
        found.append(f"model {wanted.model} (the daemon runs {daemon.model})")
    if asked.base_url_named and wanted.base_url != daemon.base_url:
        runs = daemon.base_url or "the provider's own API"
        found.append(f"base URL {wanted.base_url} (the daemon uses {runs})")
    variable = KEY_VARIABLES.get(daemon.provider)  # type: ignore[call-overload]
    key = _key_for(daemon.provider, wanted)
    if variable is not None and key is not None:
        if daemon.key_check is None:
            found.append(f"the {variable} of this environment (the daemon has none)")
        elif not hmac.compare_digest(key_check(key, token), daemon.key_check):
            found.append(f"the {variable} of this environment (the daemon has another one)")
    return found


def _key_for(provider: str, wanted: ProviderConfig) -> str | None:
    """The key this connect's environment holds for ``provider``, if it asked for that one."""
    return wanted.api_key if wanted.provider == provider else None
