"""Turning the provider options and the environment into model routes.

The provider defaults to whichever key the environment holds (Anthropic,
then OpenAI), and to the embedded replay provider when neither is set, so
``toolprep acp`` works on a machine with no key and no network.

The key is read here, once, rather than left to the SDKs, so the agent
knows exactly which secret its tools must never see.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from toolprep.runtime.kernel.retry import DEFAULT_MAX_RETRY_WAIT
from toolprep.runtime.providers.routes import ModelRoute
from toolprep.runtime.providers.sse import DEFAULT_MAX_EVENT_BYTES

if TYPE_CHECKING:
    from toolprep.runtime.providers.base import Provider

__all__ = [
    "DEFAULT_MODELS",
    "KEY_VARIABLES",
    "ProviderConfig",
    "ProviderName",
    "build_routes",
    "default_provider",
    "resolve_provider_config",
]

ProviderName = Literal["anthropic", "openai", "replay"]

KEY_VARIABLES: dict[ProviderName, str] = {
    "anthropic": "ANTHROPIC_API_KEY",
    "openai": "OPENAI_API_KEY",
}
"""Where each provider's key is read from."""

DEFAULT_MODELS: dict[str, str] = {
    "anthropic": "claude-sonnet-4-5",
    "openai": "gpt-4o",
    "replay": "replay",
}


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    """The provider the routes are built from: the provider options resolved against the
    environment (the default provider, the default model, the key), and checked."""

    provider: ProviderName
    model: str
    fallback_models: tuple[str, ...] = ()
    base_url: str | None = None
    max_retries: int = 3
    replay_file: Path | None = None
    replay_pace: float | None = None
    max_sse_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    max_retry_wait: float = DEFAULT_MAX_RETRY_WAIT
    context_window: int | None = None  # None: each model's, looked up by name
    extra: dict[str, str] = field(default_factory=dict)
    api_key: str | None = field(default=None, repr=False)


def default_provider(env: Mapping[str, str] | None = None) -> ProviderName:
    env = os.environ if env is None else env
    for name, variable in KEY_VARIABLES.items():
        if env.get(variable):
            return name
    return "replay"


def resolve_provider_config(
    *,
    provider: str | None,
    model: str | None,
    fallback_models: Sequence[str] = (),
    base_url: str | None = None,
    max_retries: int = 3,
    replay_file: str | None = None,
    max_sse_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    max_retry_wait: float = DEFAULT_MAX_RETRY_WAIT,
    context_window: int | None = None,
    env: Mapping[str, str] | None = None,
) -> ProviderConfig:
    name: ProviderName
    if provider is None:
        name = default_provider(env)
    elif provider in ("anthropic", "openai", "replay"):
        name = provider  # type: ignore[assignment]
    else:
        raise ValueError(f"unknown provider {provider!r}: use anthropic, openai or replay")
    if max_retries < 0:
        raise ValueError("--max-retries must be >= 0")
    if max_sse_event_bytes <= 0:
        raise ValueError(f"--max-sse-event-bytes must be > 0, got {max_sse_event_bytes}")
    if not max_retry_wait >= 0:  # also rejects NaN
        raise ValueError(f"--max-retry-wait must be >= 0 seconds, got {max_retry_wait}")
    if context_window is not None and context_window <= 0:
        raise ValueError(f"--context-window must be > 0 tokens, got {context_window}")
    env = os.environ if env is None else env
    key_variable = KEY_VARIABLES.get(name)
    return ProviderConfig(
        provider=name,
        model=model or DEFAULT_MODELS[name],
        fallback_models=tuple(fallback_models),
        base_url=base_url,
        max_retries=max_retries,
        replay_file=Path(replay_file) if replay_file else None,
        api_key=(env.get(key_variable) or None) if key_variable else None,
        max_sse_event_bytes=max_sse_event_bytes,
        max_retry_wait=max_retry_wait,
        context_window=context_window,
    )


def build_routes(settings: ProviderConfig) -> list[ModelRoute]:
    """One route per model in the fallback chain, all on the chosen provider.

    The replay provider imports no SDK; an SDK provider is a ``DeferredProvider``,
    whose SDK loads on a background thread from here on, so nothing before the
    first model request waits for it. Settings it could not be built from are
    refused here all the same.
    """
    provider: Provider
    if settings.provider == "replay":
        from toolprep.runtime.providers.replay import ReplayProvider

        provider = ReplayProvider.from_script(settings.replay_file)
    else:
        from toolprep.runtime.providers.deferred import DeferredProvider
        from toolprep.runtime.providers.factory import build_provider
        from toolprep.runtime.providers.sdks import SDK_MODULES, check_provider_key

        name = settings.provider
        check_provider_key(name, api_key=settings.api_key, base_url=settings.base_url)
        # The SDKs' own retries stay off: they wait out a retry-after silently (Anthropic's
        # for any length, OpenAI's up to two minutes). Every retry goes through the
        # supervisor's policy instead, which caps the wait and tells the user about it.
        build = functools.partial(
            build_provider,
            name,
            base_url=settings.base_url,
            api_key=settings.api_key,
            max_retries=0,
            max_event_bytes=settings.max_sse_event_bytes,
        )
        provider = DeferredProvider(name, SDK_MODULES[name], build)
    models = (settings.model, *settings.fallback_models)
    return [ModelRoute(provider, model, settings.context_window) for model in models]
