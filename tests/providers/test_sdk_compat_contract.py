"""The contract of ``runtime/providers/sdk_compat.py`` with the installed SDKs.

Each private part of ``anthropic`` and ``openai`` the providers use is checked on the
real objects: the name exists, and it builds what the providers rely on. An SDK upgrade
that renames or reshapes one fails here, naming the SDK and its version, rather than as
a provider that no longer fails the way ``create()`` would.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import anthropic
import httpx2
import openai
import pytest

from tests.support.contract import broken
from toolprep.runtime.providers import sdk_compat
from toolprep.runtime.providers.direct_post import ExceptionMap

COMPAT = "runtime/providers/sdk_compat.py"
REQUEST = httpx2.Request("POST", "http://127.0.0.1:9/v1/messages")


# The clients are never used to send: their httpx clients open no connection.
@pytest.fixture
def anthropic_client() -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(api_key="k", base_url="http://127.0.0.1:9", max_retries=0)


@pytest.fixture
def openai_client() -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key="k", base_url="http://127.0.0.1:9/v1", max_retries=0)


def _mapped(exception_map: ExceptionMap, exc: BaseException) -> BaseException:
    try:
        with exception_map():
            raise exc
    except BaseException as mapped:
        return mapped
    raise AssertionError("the map swallowed the error")


@pytest.mark.parametrize(
    ("sdk", "exception_map"),
    [
        ("anthropic", sdk_compat.anthropic_exception_map),
        ("openai", sdk_compat.openai_exception_map),
    ],
)
def test_the_vendored_map_turns_aiohttp_errors_into_httpx_errors_with_their_text(
    sdk: str, exception_map: Any
) -> None:
    error = aiohttp.ClientPayloadError("cut short")

    mapped = _mapped(exception_map(), error)

    assert isinstance(mapped, httpx2.TransportError), broken(
        sdk, COMPAT, f"_vendor's map_aiohttp_exceptions gave {mapped!r} for {error!r}"
    )
    assert str(mapped) == "cut short" and mapped.__cause__ is error, broken(
        sdk, COMPAT, "the mapped error no longer carries the text and cause of aiohttp's"
    )


def test_anthropic_status_errors_come_from_its_client(
    anthropic_client: anthropic.AsyncAnthropic,
) -> None:
    answer = httpx2.Response(
        429, request=REQUEST, json={"type": "error", "error": {"message": "slow down"}}
    )

    error = sdk_compat.status_error_factory(anthropic_client)(answer)

    assert isinstance(error, anthropic.RateLimitError), broken(
        "anthropic", COMPAT, f"_make_status_error_from_response gave {error!r} for a 429"
    )
    assert error.status_code == 429 and "slow down" in str(error), broken(
        "anthropic", COMPAT, f"the status error lost the status or message: {error!r}"
    )


def test_openai_status_errors_come_from_its_client(openai_client: openai.AsyncOpenAI) -> None:
    answer = httpx2.Response(503, request=REQUEST, json={"error": {"message": "overloaded"}})

    error = sdk_compat.status_error_factory(openai_client)(answer)

    assert isinstance(error, openai.InternalServerError), broken(
        "openai", COMPAT, f"_make_status_error_from_response gave {error!r} for a 503"
    )
    assert error.status_code == 503 and "overloaded" in str(error), broken(
        "openai", COMPAT, f"the status error lost the status or message: {error!r}"
    )


def test_anthropic_connection_errors_come_from_its_client(
    anthropic_client: anthropic.AsyncAnthropic,
) -> None:
    make = sdk_compat.anthropic_connection_error(anthropic_client)

    timed_out = make(REQUEST, httpx2.ReadTimeout("slow"))
    refused = make(REQUEST, httpx2.ConnectError("refused"))

    assert isinstance(timed_out, anthropic.APITimeoutError), broken(
        "anthropic", COMPAT, f"_make_timeout_error gave {timed_out!r}"
    )
    assert isinstance(refused, anthropic.APIConnectionError), broken(
        "anthropic", COMPAT, f"_make_connection_error gave {refused!r}"
    )
    assert not isinstance(refused, anthropic.APITimeoutError), broken(
        "anthropic", COMPAT, "_make_connection_error now gives a timeout error"
    )
    assert timed_out.request is REQUEST and refused.request is REQUEST, broken(
        "anthropic", COMPAT, "the connection errors no longer carry the request"
    )


@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
def test_the_http_client_an_sdk_client_sends_with_is_its_own(sdk: str) -> None:
    own = httpx2.AsyncClient()
    client: Any
    if sdk == "anthropic":
        client = anthropic.AsyncAnthropic(api_key="k", http_client=own)
    else:
        client = openai.AsyncOpenAI(api_key="k", http_client=own)

    assert sdk_compat.sdk_http_client(client) is own, broken(
        sdk, COMPAT, "the client no longer keeps the httpx client it sends with as _client"
    )
