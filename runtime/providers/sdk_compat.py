"""The private parts of the ``anthropic`` and ``openai`` SDKs the providers use, and only here.

The providers post their streams themselves (``DirectPost``) yet must fail exactly
as the SDK's ``create()`` would: same exception classes, same messages. The SDKs make
those with private factories on the client and map aiohttp's errors with a private,
vendored map; these are reached here and nowhere else, each through one small function
called once per provider (or once per failure), never per event.
``tests/providers/test_sdk_compat_contract.py`` builds the real objects of the installed
SDKs and fails, naming the SDK and its version, when an upgrade breaks one of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import httpx2

if TYPE_CHECKING:
    import anthropic
    import openai

    from toolprep.runtime.providers.direct_post import (
        ConnectionErrorFactory,
        ExceptionMap,
        SdkClient,
    )

__all__ = [
    "anthropic_connection_error",
    "anthropic_exception_map",
    "openai_exception_map",
    "sdk_http_client",
    "status_error_factory",
]


def anthropic_exception_map() -> ExceptionMap:
    """Anthropic's aiohttp -> httpx error map (``anthropic._vendor``), imported on the call:
    it imports aiohttp, which the replay provider must not pay for."""
    from anthropic._vendor.httpx_aiohttp.transport import map_aiohttp_exceptions

    return map_aiohttp_exceptions


def openai_exception_map() -> ExceptionMap:
    """OpenAI's aiohttp -> httpx error map (``openai._vendor``; it reports a refused
    connection as a connect timeout, unlike Anthropic's), imported on the call."""
    from openai._vendor.httpx_aiohttp.transport import map_aiohttp_exceptions

    return map_aiohttp_exceptions


def status_error_factory(
    client: anthropic.AsyncAnthropic | openai.AsyncOpenAI,
) -> Callable[[httpx2.Response], Exception]:
    """The client's own factory for a non-2xx answer's exception (``RateLimitError`` and so
    on, with the SDK's message), resolved once: a bound method."""
    return client._make_status_error_from_response


def anthropic_connection_error(client: anthropic.AsyncAnthropic) -> ConnectionErrorFactory:
    """Anthropic's own words for a failed connection, from the client that would have sent
    it (OpenAI's are its public ``APIConnectionError`` / ``APITimeoutError``)."""

    def make(request: httpx2.Request, cause: httpx2.TransportError) -> Exception:
        if isinstance(cause, httpx2.TimeoutException):
            return client._make_timeout_error(request, cause)
        return client._make_connection_error(request, cause)

    return make


def sdk_http_client(client: SdkClient) -> httpx2.AsyncClient:
    """The httpx client the SDK client sends with (both SDKs keep it as ``_client``)."""
    http_client = getattr(client, "_client", None)
    if not isinstance(http_client, httpx2.AsyncClient):
        raise TypeError(f"{type(client).__name__} has no httpx client to send with")
    return http_client
