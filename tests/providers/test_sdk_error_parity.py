"""The providers post without the SDKs, yet fail with the SDKs' own exceptions.

Each answer is served from a real loopback server twice: once to the SDK client
itself (``create(stream=True)``, ``max_retries=0``, its aiohttp client) and once to
our provider. The exception the SDK raises must be the cause of our
``StreamError``: same class, same message, same status code; and the
``StreamError`` must be the one the SDK's exception maps to (kind, retryable,
``retry_after``), which is what the supervisor's retries and fallback read.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from tests.providers.helpers import collect
from toolprep.messages.content import Content, TextPart
from toolprep.runtime.providers.base import ModelRequest, Provider, StreamError
from toolprep.runtime.providers.factory import DEFAULT_TIMEOUT, build_provider
from toolprep.runtime.providers.streaming import sdk_status_error
from toolprep.testing import (
    FakeProviderServer,
    ScriptedResponse,
    anthropic_sse,
    openai_sse,
)

REQUEST = ModelRequest(model="m", history=(Content("user", (TextPart("hi"),)),), max_tokens=5)
WIRES = ("anthropic", "openai")


async def _sdk_failure(
    wire: str, base_url: str, timeout: httpx2.Timeout = DEFAULT_TIMEOUT
) -> Exception | None:
    """What a caller of the SDK's ``create(stream=True)`` gets, reading the stream to its end."""
    client: Any
    if wire == "anthropic":
        client = anthropic.AsyncAnthropic(
            base_url=base_url,
            api_key="test-key",
            max_retries=0,
            timeout=timeout,
            http_client=anthropic.DefaultAioHttpClient(),
        )
        create: Callable[[], Any] = lambda: client.messages.create(  # noqa: E731
            model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}], stream=True
        )
    else:
        client = openai.AsyncOpenAI(
            base_url=base_url + "/v1",
            api_key="test-key",
            max_retries=0,
            timeout=timeout,
            http_client=openai.DefaultAioHttpClient(),
        )
        create = lambda: client.chat.completions.create(  # noqa: E731
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    try:
        stream = await create()
        async for _ in stream:
            pass
    except Exception as exc:
        return exc
    finally:
        await client.close()
    return None


def _provider(wire: str, base_url: str, timeout: httpx2.Timeout = DEFAULT_TIMEOUT) -> Provider:
    """The production build: the SDK client over the provider's own aiohttp session."""
    url = base_url + ("/v1" if wire == "openai" else "")
    return build_provider(wire, base_url=url, api_key="test-key", max_retries=0, timeout=timeout)


def _both(
    wire: str, answer: ScriptedResponse, timeout: httpx2.Timeout = DEFAULT_TIMEOUT
) -> tuple[Exception | None, StreamError | None]:
    with FakeProviderServer() as server:
        server.enqueue(answer, answer)
        sdk_error = asyncio.run(_sdk_failure(wire, server.base_url, timeout))
        _, ours = collect(_provider(wire, server.base_url, timeout), REQUEST)
    return sdk_error, ours


def _error_body(wire: str, error_type: str, message: str) -> dict[str, Any]:
    if wire == "anthropic":
        return {"type": "error", "error": {"type": error_type, "message": message}}
    return {"error": {"type": error_type, "message": message, "code": None}}


STATUS_CASES = {
    "429-retry-after": (429, {"retry-after": "7"}, "rate_limit_error", anthropic.RateLimitError),
    "401": (401, {}, "authentication_error", anthropic.AuthenticationError),
    "500": (500, {}, "api_error", anthropic.InternalServerError),
    "529-overloaded": (529, {}, "overloaded_error", anthropic.OverloadedError),
}
OPENAI_CLASSES: dict[str, type[Exception]] = {
    "429-retry-after": openai.RateLimitError,
    "401": openai.AuthenticationError,
    "500": openai.InternalServerError,
    "529-overloaded": openai.InternalServerError,
}


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("case", sorted(STATUS_CASES))
def test_a_status_error_is_the_sdks_own(wire: str, case: str) -> None:
    status, headers, error_type, anthropic_class = STATUS_CASES[case]
    answer = ScriptedResponse(
        status=status, headers=headers, body=_error_body(wire, error_type, f"refused: {case}")
    )
    sdk_error, ours = _both(wire, answer)
    expected_class = anthropic_class if wire == "anthropic" else OPENAI_CLASSES[case]
    assert type(sdk_error) is expected_class
    assert ours is not None
    cause = ours.__cause__
    assert type(cause) is type(sdk_error)
    assert str(cause) == str(sdk_error)
    assert isinstance(cause, anthropic.APIStatusError | openai.APIStatusError)
    assert isinstance(sdk_error, anthropic.APIStatusError | openai.APIStatusError)
    assert cause.status_code == sdk_error.status_code == status
    mapped = sdk_status_error(sdk_error)
    assert (ours.message, ours.kind, ours.retryable, ours.status, ours.retry_after) == (
        mapped.message,
        mapped.kind,
        mapped.retryable,
        mapped.status,
        mapped.retry_after,
    )
    if case == "429-retry-after":
        assert ours.retry_after == 7.0


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _assert_transport_failure(
    ours: StreamError | None, sdk_error: Exception | None, expected: type[Exception]
) -> None:
    """The SDK raised ``expected``; ours is a retryable transport failure caused by its twin."""
    assert type(sdk_error) is expected
    assert ours is not None
    assert type(ours.__cause__) is expected
    assert str(ours.__cause__) == str(sdk_error)
    assert (ours.kind, ours.retryable) == ("transport", True)


@pytest.mark.parametrize("wire", WIRES)
def test_a_refused_connection_is_the_sdks_own_error(wire: str) -> None:
    """OpenAI's SDK calls it a timeout, Anthropic's names the address: both kept as the cause,
    while the message says what happened and where."""
    base_url = f"http://127.0.0.1:{_closed_port()}"
    sdk_error = asyncio.run(_sdk_failure(wire, base_url))
    _, ours = collect(_provider(wire, base_url), REQUEST)
    expected = anthropic.APIConnectionError if wire == "anthropic" else openai.APITimeoutError
    _assert_transport_failure(ours, sdk_error, expected)
    assert ours is not None
    assert ours.message.startswith("connection refused: nothing is listening at ")


@pytest.mark.parametrize("wire", WIRES)
def test_a_connection_cut_mid_stream_is_the_sdks_own_error(wire: str) -> None:
    sse = anthropic_sse if wire == "anthropic" else openai_sse
    answer = ScriptedResponse(sse(text="hello there", fragment_size=2), cut_after=3)
    sdk_error, ours = _both(wire, answer)
    expected = anthropic.APIConnectionError if wire == "anthropic" else openai.APIConnectionError
    _assert_transport_failure(ours, sdk_error, expected)
    assert ours is not None
    # The cause is the SDK's error; the message says what happened, without the parser's
    # "400" that aiohttp's text carries (no server sent it).
    assert ours.message == (
        "connection failed: the response ended before it was complete "
        "(Not enough data to satisfy transfer length header)"
    )


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("stall_after", [0, 3], ids=["before-the-body", "mid-body"])
def test_a_body_that_stops_moving_times_out_with_the_sdks_own_error(
    wire: str, stall_after: int
) -> None:
    """Waiting for the body's first byte is aiohttp's own timer; after it, the runtime's
    sweep (``read_deadline``). Either way the same error as the SDK's, once the read
    timeout has passed."""
    sse = anthropic_sse if wire == "anthropic" else openai_sse
    answer = ScriptedResponse(sse(text="hello there", fragment_size=2), stall_after=stall_after)
    timeout = httpx2.Timeout(30.0, read=0.5)
    sdk_error, ours = _both(wire, answer, timeout)
    expected = anthropic.APITimeoutError if wire == "anthropic" else openai.APITimeoutError
    _assert_transport_failure(ours, sdk_error, expected)
    assert ours is not None
    assert ours.message == "connection failed: Timeout on reading data from socket"


@pytest.mark.parametrize("wire", WIRES)
def test_an_html_page_instead_of_events_fails_where_the_sdk_reads_nothing(wire: str) -> None:
    """The one deliberate difference: the SDK ends such a stream quietly, with no event."""
    answer = ScriptedResponse(
        body="<html>proxy login</html>", headers={"content-type": "text/html"}
    )
    sdk_error, ours = _both(wire, answer)
    assert sdk_error is None
    assert ours is not None
    assert (ours.kind, ours.retryable) == ("not_event_stream", False)
    assert "text/html" in ours.message and "proxy login" in ours.message
