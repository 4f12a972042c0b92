"""A success status with a body that is not an event stream: say what arrived instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.providers.helpers import anthropic_provider, collect, openai_provider, text_of
from tests.runtime import scenarios as sc
from tests.support.runtime_harness import harness
from toolprep.runtime.providers.base import ModelRequest, Provider
from toolprep.runtime.providers.errors import not_event_stream
from toolprep.testing import FakeProviderServer, ScriptedResponse

KINDS = ["anthropic", "openai"]
REQUEST = ModelRequest(model="m", history=())

LOGIN_PAGE = (
    "<!DOCTYPE html>\n<html><head><title>Sign in to the corporate proxy</title></head>\n"
    "<body>\n\t<form action='/login'>" + "<input>" * 100 + "</form></body></html>"
)
COMPLETION = {
    "id": "chatcmpl-9",
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "not streamed"}}],
}


def _provider(kind: str, server: FakeProviderServer) -> Provider:
    if kind == "anthropic":
        return anthropic_provider(server.base_url)
    return openai_provider(server.base_url)


def test_preview_is_one_printable_line_of_at_most_200_characters() -> None:
    head = ("\x1b[31mred\x00 \r\n\tline two " + "é" * 300).encode() + b"\xff\xfe"
    error = not_event_stream("text/html;\r\n charset=utf-8", head)
    assert (error.kind, error.retryable) == ("not_event_stream", False)
    assert "content-type 'text/html; charset=utf-8'" in error.message
    preview = error.message.split(": ", 1)[1]
    assert preview.startswith("'[31mred line two éé")
    assert preview.endswith("...'")
    assert len(preview) == 200 + len("...") + 2
    assert all(c.isprintable() for c in error.message)


def test_missing_content_type_is_named_as_such() -> None:
    assert "content-type 'none': ''" in not_event_stream(None, b"").message


@pytest.mark.parametrize("kind", KINDS)
def test_html_page_with_status_200(kind: str) -> None:
    with FakeProviderServer() as server:
        server.enqueue(
            ScriptedResponse(body=LOGIN_PAGE, headers={"content-type": "text/html; charset=utf-8"})
        )
        chunks, error = collect(_provider(kind, server), REQUEST)
    assert chunks == [] and error is not None
    assert (error.kind, error.retryable) == ("not_event_stream", False)
    assert error.message.startswith(
        "expected a server-sent event stream but received content-type "
        "'text/html; charset=utf-8': '<!DOCTYPE html> <html><head><title>Sign in to the "
        "corporate proxy</title>"
    )
    assert error.message.endswith("...'") and "\n" not in error.message


@pytest.mark.parametrize("kind", KINDS)
def test_json_answer_when_a_stream_was_asked_for(kind: str) -> None:
    with FakeProviderServer() as server:
        server.enqueue(ScriptedResponse(body=COMPLETION))  # served as application/json
        chunks, error = collect(_provider(kind, server), REQUEST)
    assert chunks == [] and error is not None
    assert error.kind == "not_event_stream"
    assert "received content-type 'application/json'" in error.message
    assert json.dumps(COMPLETION)[:60] in error.message


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("content_type", ["text/plain", "application/octet-stream", ""])
def test_sse_under_a_loose_content_type_is_still_read(kind: str, content_type: str) -> None:
    with FakeProviderServer() as server:
        server.enqueue(
            sc.ok(sc.text_turn(kind, "loosely labelled"), headers={"content-type": content_type})
        )
        chunks, error = collect(_provider(kind, server), REQUEST)
    assert error is None
    assert text_of(chunks) == "loosely labelled"


@pytest.mark.parametrize("kind", KINDS)
def test_turn_fails_with_what_was_received_and_the_agent_serves_on(
    kind: str, tmp_path: Path
) -> None:
    with harness(kind, tmp_path, max_retries=3) as h:
        h.server.enqueue(
            ScriptedResponse(
                body="<html>Bad gateway page</html>", headers={"content-type": "text/html"}
            )
        )
        broken, broken_sink = h.session()
        result = h.turn(broken, broken_sink)
        assert result.stop_reason is None
        assert result.error == (
            "expected a server-sent event stream but received content-type 'text/html': "
            "'<html>Bad gateway page</html>'"
        )
        assert len(h.server.requests) == 1  # final: no retry
        h.server.enqueue(sc.ok(sc.text_turn(kind, "fine")))
        other, other_sink = h.session()
        assert h.turn(other, other_sink).stop_reason == "end_turn"
