"""A body's read timeout counts from its last byte, not from its start.

The stream loop checks open bodies for progress once per sweep instead of re-arming
a timer on every read (``read_deadline``); a body that keeps moving, however long it
runs in all, must never be timed out by it.
"""

from __future__ import annotations

import time

import httpx2
import pytest

from tests.providers.helpers import collect, text_of
from toolprep.messages.content import Content, TextPart
from toolprep.runtime.providers.base import ModelRequest
from toolprep.runtime.providers.factory import build_provider
from toolprep.testing import (
    FakeProviderServer,
    ScriptedResponse,
    anthropic_sse,
    openai_sse,
)

REQUEST = ModelRequest(model="m", history=(Content("user", (TextPart("hi"),)),), max_tokens=5)
READ_TIMEOUT_S = 0.5
PACE_S = 0.15


@pytest.mark.parametrize("wire", ["anthropic", "openai"])
def test_a_body_that_keeps_moving_outlives_its_read_timeout(wire: str) -> None:
    sse = anthropic_sse if wire == "anthropic" else openai_sse
    answer = ScriptedResponse(sse(text="a slow but steady answer", fragment_size=2), pace_s=PACE_S)
    assert len(answer.event_list()) * PACE_S > 3 * READ_TIMEOUT_S
    with FakeProviderServer() as server:
        server.enqueue(answer)
        url = server.base_url + ("/v1" if wire == "openai" else "")
        provider = build_provider(
            wire,
            base_url=url,
            api_key="test-key",
            max_retries=0,
            timeout=httpx2.Timeout(30.0, read=READ_TIMEOUT_S),
        )
        started = time.monotonic()
        chunks, error = collect(provider, REQUEST)
    assert error is None
    assert text_of(chunks) == "a slow but steady answer"
    assert time.monotonic() - started > 3 * READ_TIMEOUT_S
