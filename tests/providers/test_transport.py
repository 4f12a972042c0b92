"""The transport under the providers: the SDKs' aiohttp client, a body serialised once.

The providers skip the SDKs' ``create()`` and post a body of their own through the
SDK's public ``post``; these tests hold that shortcut to what ``create()`` itself sends
(same body, same headers, same path) and check that the aiohttp session it opens is
closed by ``Provider.aclose``.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, cast

import anthropic
import httpx2
import openai
import pytest

from tests.providers.helpers import collect
from toolprep.messages.content import (
    Content,
    FunctionCall,
    FunctionCallPart,
    FunctionResponse,
    FunctionResponsePart,
    TextPart,
    ThoughtPart,
)
from toolprep.runtime.providers.anthropic_adapter import REDACTED_THINKING_PREFIX
from toolprep.runtime.providers.anthropic_provider import AnthropicProvider, build_messages_params
from toolprep.runtime.providers.base import ModelRequest, ToolDeclaration
from toolprep.runtime.providers.direct_post import environment_proxy
from toolprep.runtime.providers.factory import DEFAULT_TIMEOUT, build_provider
from toolprep.runtime.providers.openai_provider import build_chat_params
from toolprep.testing import (
    FakeProviderServer,
    RecordedRequest,
    ScriptedResponse,
    anthropic_sse,
    openai_sse,
)

REPO = Path(__file__).resolve().parents[2]

READ = ToolDeclaration(
    "read_file",
    "Read a file",
    {
        "type": "object",
        "properties": {"path": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
        "required": ["path"],
    },
)
SEARCH = ToolDeclaration("search", "Search text", {"type": "object", "properties": {}})

HISTORY = (
    Content("user", (TextPart("Look at a.txt and the naïve ünïcode file ✓"),)),
    Content(
        "model",
        (
            ThoughtPart("I should read both", "SIG1"),
            ThoughtPart("", REDACTED_THINKING_PREFIX + "opaque=="),
            ThoughtPart("unsigned musing"),
            TextPart("Reading them."),
            FunctionCallPart(FunctionCall("call_a", "read_file", {"path": "a.txt", "limit": 20})),
            FunctionCallPart(FunctionCall("call_b", "read_file", {"path": "b.txt"})),
        ),
    ),
    Content(
        "user",
        (
            FunctionResponsePart(
                FunctionResponse("call_a", "read_file", {"output": 'alpha\n\tbeta "q"'})
            ),
            FunctionResponsePart(
                FunctionResponse("call_b", "read_file", {"error": "no such file"}, is_error=True)
            ),
        ),
    ),
    Content("model", (FunctionCallPart(FunctionCall("call_c", "search", {"pattern": "x"})),)),
    Content("user", (TextPart("Never mind that search. "), TextPart("Summarise?"))),
)

REQUEST = ModelRequest(
    model="model-x", history=HISTORY, system="Be brief.", tools=(READ, SEARCH), max_tokens=321
)

BIG_INT_REQUEST = ModelRequest(
    model="model-x",
    history=(Content("user", (TextPart("count"),)),),
    tools=(
        ToolDeclaration(
            "count",
            "Count up to a huge bound",
            {"type": "object", "properties": {"n": {"type": "integer", "maximum": 2**70}}},
        ),
    ),
)
"""orjson refuses integers beyond 64 bits; the body must still match the SDK's."""


def _sse(provider_name: str) -> str:
    return anthropic_sse(text="ok") if provider_name == "anthropic" else openai_sse(text="ok")


def _base_url(provider_name: str, server: FakeProviderServer) -> str:
    return server.base_url + ("/v1" if provider_name == "openai" else "")


async def _send_with_sdk_create(provider_name: str, base_url: str, request: ModelRequest) -> None:
    """What the SDK's own ``create()`` sends for ``request``, over the same aiohttp client."""
    if provider_name == "anthropic":
        anthropic_client = anthropic.AsyncAnthropic(
            base_url=base_url,
            api_key="test-key",
            max_retries=0,
            timeout=DEFAULT_TIMEOUT,
            http_client=anthropic.DefaultAioHttpClient(),
        )
        try:
            messages = await anthropic_client.messages.create(
                **build_messages_params(request), stream=True
            )
            await messages.close()
        finally:
            await anthropic_client.close()
        return
    openai_client = openai.AsyncOpenAI(
        base_url=base_url,
        api_key="test-key",
        max_retries=0,
        timeout=DEFAULT_TIMEOUT,
        http_client=openai.DefaultAioHttpClient(),
    )
    try:
        chunks = await openai_client.chat.completions.create(
            **build_chat_params(request), stream=True
        )
        await chunks.close()
    finally:
        await openai_client.close()


def _ours_and_sdks(
    provider_name: str, request: ModelRequest
) -> tuple[RecordedRequest, RecordedRequest]:
    with FakeProviderServer() as server:
        server.enqueue(ScriptedResponse(_sse(provider_name)), ScriptedResponse(_sse(provider_name)))
        base_url = _base_url(provider_name, server)
        provider = build_provider(provider_name, base_url=base_url, api_key="test-key")
        _, error = collect(provider, request)
        assert error is None
        asyncio.run(_send_with_sdk_create(provider_name, base_url, request))
        ours, sdks = server.requests
    return ours, sdks


@pytest.mark.parametrize("provider_name", ["anthropic", "openai"])
@pytest.mark.parametrize("request_", [REQUEST, BIG_INT_REQUEST], ids=["history", "big-int"])
def test_body_and_headers_match_what_sdk_create_sends(
    provider_name: str, request_: ModelRequest
) -> None:
    ours, sdks = _ours_and_sdks(provider_name, request_)
    assert ours.path == sdks.path
    assert ours.body == sdks.body
    assert ours.body["stream"] is True
    # The serialisers may escape non-ASCII text differently; every other header is the SDK's.
    assert {k: v for k, v in ours.headers.items() if k != "content-length"} == {
        k: v for k, v in sdks.headers.items() if k != "content-length"
    }


def test_the_representative_request_exercises_every_history_shape() -> None:
    """Guards the comparison above against a request too plain to catch a difference."""
    ours, _ = _ours_and_sdks("anthropic", REQUEST)
    block_types = {b["type"] for m in ours.body["messages"] for b in m["content"]}
    assert block_types == {"text", "thinking", "redacted_thinking", "tool_use", "tool_result"}
    assert len(ours.body["tools"]) == 2
    assert ours.body["system"] == "Be brief."


@pytest.mark.parametrize("provider_name", ["anthropic", "openai"])
def test_a_body_that_is_not_json_is_a_final_invalid_request(provider_name: str) -> None:
    request = ModelRequest(
        model="model-x",
        history=(Content("user", (TextPart("hi"),)),),
        tools=(ToolDeclaration("odd", "Odd schema", {"type": "object", "default": object()}),),
    )
    with FakeProviderServer() as server:
        provider = build_provider(
            provider_name, base_url=_base_url(provider_name, server), api_key="test-key"
        )
        _, error = collect(provider, request)
        assert server.requests == []
    assert error is not None
    assert (error.kind, error.retryable) == ("invalid_request", False)
    assert "body is not JSON" in error.message


_ONE_STREAM = textwrap.dedent(
    """
    import asyncio, gc, sys
    from toolprep.testing import (
        FakeProviderServer, ScriptedResponse, anthropic_sse, openai_sse,
    )
    from toolprep.messages.content import Content, TextPart
    from toolprep.runtime.providers.base import ModelRequest
    from toolprep.runtime.providers.factory import build_provider

    name, close = sys.argv[1], sys.argv[2] == "close"
    request = ModelRequest(model="m", history=(Content("user", (TextPart("hi"),)),))

    async def one_stream(provider):
        async for _ in provider.stream(request):
            pass
        if close:
            await provider.aclose()

    with FakeProviderServer() as server:
        server.enqueue(ScriptedResponse(
            anthropic_sse(text="ok") if name == "anthropic" else openai_sse(text="ok")
        ))
        base_url = server.base_url + ("/v1" if name == "openai" else "")
        provider = build_provider(name, base_url=base_url, api_key="k", max_retries=0)
        asyncio.run(one_stream(provider))
        del provider
        gc.collect()
    print("streamed")
    """
)


def _one_stream_stderr(provider_name: str, close: str) -> str:
    """Run one stream in a fresh interpreter that prints every ResourceWarning."""
    result = subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", "-c", _ONE_STREAM, provider_name, close],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "streamed"
    return result.stderr


@pytest.mark.parametrize("provider_name", ["anthropic", "openai"])
def test_aclose_closes_the_aiohttp_session(provider_name: str) -> None:
    stderr = _one_stream_stderr(provider_name, "close")
    assert "Unclosed" not in stderr and "ResourceWarning" not in stderr, stderr


@pytest.mark.parametrize("provider_name", ["anthropic", "openai"])
def test_without_aclose_aiohttp_reports_the_open_session(provider_name: str) -> None:
    """The control for the test above: the stream really ran over an aiohttp session."""
    stderr = _one_stream_stderr(provider_name, "leave-open")
    assert "Unclosed client session" in stderr, stderr


def test_an_injected_http_client_is_used_instead() -> None:
    """Tests and the replay provider bring an httpx client with a transport of their own."""
    import httpx2

    seen: list[str] = []

    async def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(str(request.url))
        return httpx2.Response(
            200,
            headers={"content-type": "text/event-stream"},
            content=anthropic_sse(text="from the mock transport").encode(),
        )

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    provider = build_provider(
        "anthropic", base_url="http://injected.invalid", api_key="k", http_client=client
    )
    chunks, error = collect(provider, REQUEST)
    assert error is None
    assert seen == ["http://injected.invalid/v1/messages"]
    assert any(isinstance(p, TextPart) and p.text for c in chunks for p in c.parts)


@pytest.mark.parametrize(
    ("provider_name", "path"), [("anthropic", "v1/messages"), ("openai", "chat/completions")]
)
def test_requests_follow_the_clients_base_url_path_prefix_and_changes(
    provider_name: str, path: str
) -> None:
    """The absolute URL is worked out once per ``base_url``: a prefix is kept (a proxy's
    mount point) and a base URL changed on the client is followed by the next request."""
    import httpx2

    seen: list[str] = []

    async def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(str(request.url))
        return httpx2.Response(
            200, headers={"content-type": "text/event-stream"}, content=_sse(provider_name).encode()
        )

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    provider = build_provider(
        provider_name, base_url="http://proxy.invalid/team/a", api_key="k", http_client=client
    )
    for _ in range(2):
        assert collect(provider, REQUEST, keep_open=True)[1] is None
    cast(Any, provider).client.base_url = "http://other.invalid/b/"
    assert collect(provider, REQUEST, keep_open=True)[1] is None
    assert seen == [
        f"http://proxy.invalid/team/a/{path}",
        f"http://proxy.invalid/team/a/{path}",
        f"http://other.invalid/b/{path}",
    ]


async def _credentials_requests(base_url: str) -> None:
    """One stream through our provider and one through ``create()``, on clients whose
    credentials are a token provider (the SDK's token cache and auth flow), not a key."""
    from anthropic.lib.credentials import StaticToken

    def client() -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(
            base_url=base_url,
            credentials=StaticToken("token-from-the-cache"),
            max_retries=0,
            timeout=DEFAULT_TIMEOUT,
            http_client=anthropic.DefaultAioHttpClient(),
        )

    provider = AnthropicProvider(client())
    try:
        async for _ in provider.stream(REQUEST):
            pass
    finally:
        await provider.aclose()
    sdk_client = client()
    try:
        messages = await sdk_client.messages.create(**build_messages_params(REQUEST), stream=True)
        await messages.close()
    finally:
        await sdk_client.close()


def test_a_token_provider_authorises_the_stream_as_create_does() -> None:
    with FakeProviderServer() as server:
        server.enqueue(ScriptedResponse(_sse("anthropic")), ScriptedResponse(_sse("anthropic")))
        asyncio.run(_credentials_requests(server.base_url))
        ours, sdks = server.requests
    assert ours.headers["authorization"] == "Bearer token-from-the-cache"
    assert {k: v for k, v in ours.headers.items() if k != "content-length"} == {
        k: v for k, v in sdks.headers.items() if k != "content-length"
    }


@pytest.mark.parametrize("provider_name", ["anthropic", "openai"])
def test_one_provider_streams_on_two_loops_at_once(provider_name: str) -> None:
    """Each loop gets a session of its own (a session's sockets belong to its loop), and
    ``aclose`` on each loop closes that loop's."""
    import threading

    both_streaming = threading.Barrier(2, timeout=60)
    texts: list[str] = []

    with FakeProviderServer() as server:
        sse = (
            anthropic_sse(text="one two three", fragment_size=4)
            if provider_name == "anthropic"
            else openai_sse(text="one two three", fragment_size=4)
        )
        server.enqueue(ScriptedResponse(sse), ScriptedResponse(sse))
        provider = build_provider(
            provider_name, base_url=_base_url(provider_name, server), api_key="k", max_retries=0
        )

        async def stream_on_this_loop() -> None:
            got: list[str] = []
            try:
                async for chunk in provider.stream(REQUEST):
                    got += [p.text for p in chunk.parts if isinstance(p, TextPart)]
                    if len(got) == 1:
                        both_streaming.wait()  # the other loop's stream is open too
            finally:
                await provider.aclose()
            texts.append("".join(got))

        threads = [
            threading.Thread(target=asyncio.run, args=(stream_on_this_loop(),)) for _ in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    assert texts == ["one two three", "one two three"]


@pytest.mark.parametrize("provider_name", ["anthropic", "openai"])
def test_the_environments_proxy_carries_the_stream(
    provider_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the SDK's own client does: ``HTTP_PROXY`` names where every request goes."""
    for name in ("NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    with FakeProviderServer() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.base_url)
        monkeypatch.setenv("http_proxy", proxy.base_url)
        proxy.enqueue(ScriptedResponse(_sse(provider_name)))
        base_url = "http://provider.invalid" + ("/v1" if provider_name == "openai" else "")
        provider = build_provider(provider_name, base_url=base_url, api_key="k", max_retries=0)
        _, error = collect(provider, REQUEST)
        assert error is None
        (request,) = proxy.requests
    path = "v1/messages" if provider_name == "anthropic" else "v1/chat/completions"
    assert request.path == f"http://provider.invalid/{path}"


def test_no_proxy_exempts_a_host_as_the_sdk_exempts_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The proxy is read once per base URL from the environment, ``NO_PROXY`` included; the
    SDK's httpx client reads the same variables."""
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "exempt.invalid")
    monkeypatch.setenv("no_proxy", "exempt.invalid")

    assert environment_proxy(httpx2.URL("http://exempt.invalid/v1/")) is None
    assert environment_proxy(httpx2.URL("http://other.invalid/v1/")) == "http://127.0.0.1:9"
