"""Failure messages that say what happened and what to do, through the real SDK path.

A base URL without ``/v1`` gets a bare 404 from an OpenAI-compatible server;
the message names the URL and the fix. A body cut short mid-stream is reported
as such, without aiohttp's parser code (a "400" that no server sent).
"""

from __future__ import annotations

from tests.providers.helpers import collect, openai_provider
from toolprep.messages.content import Content, TextPart
from toolprep.runtime.providers.base import ModelRequest
from toolprep.runtime.providers.factory import build_provider
from toolprep.testing import FakeProviderServer, ScriptedResponse, openai_sse

REQUEST = ModelRequest(model="test-model", history=(Content("user", (TextPart("hi"),)),))


def test_a_bare_404_names_the_url_and_suggests_v1() -> None:
    with FakeProviderServer() as server:
        base = server.base_url  # as a user would write it, without /v1
        server.enqueue(ScriptedResponse(status=404, body=""))
        provider = build_provider("openai", base_url=base, api_key="k", max_retries=0)
        _, error = collect(provider, REQUEST)
        assert server.requests[0].path == "/chat/completions"
    assert error is not None
    assert (error.kind, error.status, error.retryable) == ("not_found", 404, False)
    assert error.message == (
        f"nothing answered at {base}/chat/completions (HTTP 404); check the "
        f"provider's base URL: OpenAI-compatible servers serve it under /v1, try {base}/v1"
    )


def test_a_404_that_explains_itself_is_left_as_the_server_said() -> None:
    body = {"error": {"message": "The model `nope` does not exist", "code": "model_not_found"}}
    with FakeProviderServer() as server:
        server.enqueue(ScriptedResponse(status=404, body=body))
        _, error = collect(openai_provider(server.base_url), REQUEST)
    assert error is not None
    assert error.message == "The model `nope` does not exist"


def test_a_body_cut_short_says_so_without_the_parsers_code() -> None:
    events = ScriptedResponse(events=openai_sse("hello there"), cut_after=1)
    with FakeProviderServer() as server:
        server.enqueue(events)
        _, error = collect(openai_provider(server.base_url), REQUEST)
    assert error is not None
    assert (error.kind, error.retryable) == ("transport", True)
    assert error.message.startswith(
        "connection failed: the response ended before it was complete ("
    ), error.message
    assert "400" not in error.message and "<" not in error.message
