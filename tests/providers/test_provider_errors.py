"""Failures through the real SDK clients and a real socket, mapped to StreamError."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator

import pytest

from tests.providers.helpers import anthropic_provider, collect, openai_provider, text_of
from tests.support.eventually import eventually, eventually_async
from toolprep.messages.content import Content, GenerateContentResponse, TextPart
from toolprep.runtime.providers.base import ModelRequest, Provider, StreamError
from toolprep.runtime.providers.factory import build_provider
from toolprep.testing import (
    FakeProviderServer,
    ScriptedResponse,
    anthropic_sse,
    openai_sse,
)

REQUEST = ModelRequest(model="test-model", history=(Content("user", (TextPart("hi"),)),))

MakeProvider = Callable[[str], Provider]
MakeSse = Callable[..., str]
PROVIDERS: dict[str, tuple[MakeProvider, MakeSse]] = {
    "anthropic": (anthropic_provider, anthropic_sse),
    "openai": (openai_provider, openai_sse),
}


@pytest.fixture()
def server() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as running:
        yield running


def _error(provider: Provider) -> StreamError:
    chunks, error = collect(provider, REQUEST)
    assert error is not None, f"stream ended normally with {len(chunks)} chunks"
    return error


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_clean_stream_has_no_error(server: FakeProviderServer, name: str) -> None:
    make, sse = PROVIDERS[name]
    server.enqueue(ScriptedResponse(sse(text="hello")))
    chunks, error = collect(make(server.base_url), REQUEST)
    assert error is None
    assert text_of(chunks) == "hello"


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_malformed_json_line(server: FakeProviderServer, name: str) -> None:
    make, _ = PROVIDERS[name]
    server.enqueue(ScriptedResponse("data: {this is not json\n\n"))
    error = _error(make(server.base_url))
    assert (error.kind, error.retryable) == ("malformed", True)
    assert "not JSON" in error.message


def test_truncated_anthropic_stream(server: FakeProviderServer) -> None:
    server.enqueue(ScriptedResponse(anthropic_sse(text="cut", terminal=False)))
    error = _error(anthropic_provider(server.base_url))
    assert (error.kind, error.retryable) == ("truncated", True)


def test_truncated_openai_stream(server: FakeProviderServer) -> None:
    server.enqueue(
        ScriptedResponse(openai_sse(text="cut", finish_reason="", usage_chunk=False, done=False))
    )
    error = _error(openai_provider(server.base_url))
    assert (error.kind, error.retryable) == ("truncated", True)


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_connection_cut_mid_stream(server: FakeProviderServer, name: str) -> None:
    make, sse = PROVIDERS[name]
    server.enqueue(
        ScriptedResponse(
            sse(text="a long answer that never finishes", fragment_size=4), cut_after=4
        )
    )
    chunks, error = collect(make(server.base_url), REQUEST)
    assert error is not None
    assert (error.kind, error.retryable) == ("transport", True)
    assert chunks  # what arrived before the cut was delivered


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_rate_limited_with_retry_after(server: FakeProviderServer, name: str) -> None:
    make, _ = PROVIDERS[name]
    body = (
        {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
        if name == "anthropic"
        else {"error": {"message": "slow down", "type": "requests"}}
    )
    server.enqueue(ScriptedResponse(status=429, headers={"retry-after": "3"}, body=body))
    error = _error(make(server.base_url))
    assert (error.status, error.retryable, error.retry_after, error.kind, error.message) == (
        429,
        True,
        3.0,
        "rate_limit",
        "slow down",
    )


def test_retry_after_ms_wins_over_seconds(server: FakeProviderServer) -> None:
    server.enqueue(
        ScriptedResponse(
            status=429,
            headers={"retry-after-ms": "250", "retry-after": "9"},
            body={"type": "error", "error": {"type": "rate_limit_error", "message": "x"}},
        )
    )
    assert _error(anthropic_provider(server.base_url)).retry_after == 0.25


@pytest.mark.parametrize(
    ("status", "retryable", "kind"),
    [
        (500, True, "server"),
        (503, True, "server"),
        (529, True, "overloaded"),
        (400, False, "invalid_request"),
        (401, False, "auth"),
        (403, False, "permission"),
        (404, False, "not_found"),
        (408, True, "timeout"),
    ],
)
@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_http_status_errors(
    server: FakeProviderServer, name: str, status: int, retryable: bool, kind: str
) -> None:
    make, _ = PROVIDERS[name]
    server.enqueue(ScriptedResponse(status=status, body={"error": {"message": f"status {status}"}}))
    error = _error(make(server.base_url))
    assert (error.status, error.retryable, error.kind, error.message) == (
        status,
        retryable,
        kind,
        f"status {status}",
    )
    assert error.retry_after is None


def test_server_can_veto_retry(server: FakeProviderServer) -> None:
    server.enqueue(
        ScriptedResponse(
            status=500, headers={"x-should-retry": "false"}, body={"error": {"message": "no"}}
        )
    )
    assert _error(anthropic_provider(server.base_url)).retryable is False


def test_empty_queue_answers_500_with_a_clear_message(server: FakeProviderServer) -> None:
    error = _error(anthropic_provider(server.base_url))
    assert error.status == 500
    assert "no scripted response queued" in error.message


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_connection_refused_is_transport(name: str) -> None:
    provider = build_provider(
        name,
        base_url=f"http://127.0.0.1:{_closed_port()}" + ("/v1" if name == "openai" else ""),
        api_key="k",
        max_retries=0,
    )
    error = _error(provider)
    assert (error.kind, error.retryable) == ("transport", True)


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_connection_refused_says_nothing_is_listening_at_the_url(name: str) -> None:
    """Not the SDK's words for it: OpenAI's client calls a refused connection a timeout."""
    base_url = f"http://127.0.0.1:{_closed_port()}" + ("/v1" if name == "openai" else "")
    provider = build_provider(name, base_url=base_url, api_key="k", max_retries=0)
    error = _error(provider)
    expected = f"connection refused: nothing is listening at {base_url}"
    assert error.message.rstrip("/") == expected


def test_a_refused_request_is_sent_once_and_its_retry_left_to_the_supervisor(
    server: FakeProviderServer,
) -> None:
    """The SDK client's ``max_retries`` no longer retries a stream below the supervisor,
    whose policy caps the wait and tells the user about it."""
    server.enqueue(
        ScriptedResponse(
            status=529,
            headers={"retry-after-ms": "1"},
            body={"type": "error", "error": {"type": "overloaded_error", "message": "busy"}},
        ),
        ScriptedResponse(anthropic_sse(text="second time lucky")),
    )
    _, error = collect(anthropic_provider(server.base_url, max_retries=1), REQUEST)
    assert error is not None
    assert (error.kind, error.retryable, error.retry_after) == ("overloaded", True, 0.001)
    assert len(server.requests) == 1
    assert server.requests[0].headers["x-stainless-retry-count"] == "0"


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_closing_the_stream_closes_the_http_response(server: FakeProviderServer, name: str) -> None:
    """A cancel (task cancel / aclose) must reach the socket, or stalled streams would leak."""
    make, sse = PROVIDERS[name]
    server.enqueue(ScriptedResponse(sse(text="never finishes", fragment_size=2), stall_after=3))

    async def go() -> list[GenerateContentResponse]:
        got: list[GenerateContentResponse] = []
        provider = make(server.base_url)

        async def read() -> None:
            async for chunk in provider.stream(REQUEST):
                got.append(chunk)

        task = asyncio.create_task(read())
        await eventually_async(lambda: got)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await provider.aclose()
        return got

    got = asyncio.run(go())
    assert got
    eventually(lambda: server.disconnects != 0)
    assert server.disconnects == 1


def test_factory_rejects_unknown_provider() -> None:
    with pytest.raises(ValueError, match="unknown provider"):
        build_provider("gemini")


def test_factory_openai_needs_a_key_only_for_the_default_endpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        build_provider("openai")
    assert build_provider("openai", base_url="http://127.0.0.1:1/v1").name == "openai"
