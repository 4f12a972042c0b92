"""Every recorded provider transcript, replayed through the real SDK and a loopback server.

The expected chunk sequences pin down where preparations appear (their own
empty chunk for Anthropic, the chunk of the introducing event for OpenAI),
where complete calls appear (block stop / finish reason) and what they hold.
A new fixture without an expectation here fails ``test_every_fixture_has_an_expectation``.
"""

from __future__ import annotations

import json

import pytest

from tests.providers.helpers import (
    FIXTURES,
    anthropic_provider,
    collect,
    openai_provider,
    summarize_all,
)
from tests.providers.test_anthropic_eager_streaming import GREET_ARGS
from toolprep.messages.content import Content, TextPart
from toolprep.runtime.providers.base import ModelRequest, Provider, ToolDeclaration
from toolprep.testing import FakeProviderServer, ScriptedResponse

Expectation = tuple[list[tuple[str, ...]], tuple[str, bool, str] | None]

GREET_JSON = json.dumps(GREET_ARGS, sort_keys=True)

EXPECTED: dict[str, Expectation] = {
    "anthropic-docs-basic-text.sse": (
        [
            ("text Hello",),
            ("text !",),
            ("finish STOP", "usage 25/15"),
        ],
        None,
    ),
    "anthropic-docs-extended-thinking.sse": (
        [
            ("thought Let me solve this step by step:\n\n1. First break down 27 * 453",),
            ("thought \n2. 453 = 400 + 50 + 3",),
            ("thought \n3. 27 * 400 = 10,800",),
            ("thought \n4. 27 * 50 = 1,350",),
            ("thought \n5. 27 * 3 = 81",),
            ("thought \n6. 10,800 + 1,350 + 81 = 12,231",),
            ("thought  sig=EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds...",),
            ("text 27 * 453 = 12,231",),
            ("finish STOP",),
        ],
        None,
    ),
    "anthropic-docs-tool-use.sse": (
        [
            ("text Okay",),
            ("text ,",),
            ("text  let",),
            ("text 's",),
            ("text  check",),
            ("text  the",),
            ("text  weather",),
            ("text  for",),
            ("text  San",),
            ("text  Francisco",),
            ("text ,",),
            ("text  CA",),
            ("text :",),
            ("prep toolu_01T1x1fJ34qAmk2tNTrN7Up6 get_weather",),
            (
                'call toolu_01T1x1fJ34qAmk2tNTrN7Up6 get_weather {"location": "San Francisco, CA", "unit": "fahrenheit"}',
            ),
            ("finish STOP", "usage 472/89"),
        ],
        None,
    ),
    "anthropic-sdk-basic-text.sse": (
        [
            ("text Hello",),
            ("text  there",),
            ("text !",),
            ("finish STOP", "usage 11/6"),
        ],
        None,
    ),
    "anthropic-sdk-thinking-signature-refusal.sse": (
        [
            ("thought Simple educ",),
            (
                "thought ational question about what a solar eclipse is. This is benign general knowledge — definitions are fine. Also the user called",
            ),
            (
                'thought  me "claudius" — I\'m Claude. Minor correction or just roll with it politely.',
            ),
            ("thought  sig=c3ludGhldGljLXNpZ25hdHVyZS1maXh0dXJlLWEtbm90LWEtcmVhbC1zaWduYXR1cmU=",),
            ("text Hi",),
            ("finish REFUSAL", "usage 28/106"),
        ],
        None,
    ),
    "anthropic-sdk-tool-use.sse": (
        [
            ("text I",),
            ("text 'll check the current weather in Paris for you.",),
            ("prep toolu_01NRLabsLyVHZPKxbKvkfSMn get_weather",),
            ('call toolu_01NRLabsLyVHZPKxbKvkfSMn get_weather {"location": "Paris"}',),
            ("finish STOP", "usage 377/65"),
        ],
        None,
    ),
    "anthropic-synthetic-buffered-input-write-file.sse": (
        [
            ("text I'll write",),
            ("text  the module.",),
            ("prep toolu_synthetic_W2 write_file",),
            (f"call toolu_synthetic_W2 write_file {GREET_JSON}",),
            ("finish STOP", "usage 1290/131"),
        ],
        None,
    ),
    "anthropic-synthetic-eager-input-cut-by-max-tokens.sse": (
        [
            ("text I'll write",),
            ("text  the module.",),
            ("prep toolu_synthetic_W3 write_file",),
            ("finish MAX_TOKENS", "usage 1290/96"),
        ],
        None,
    ),
    "anthropic-synthetic-eager-input-write-file.sse": (
        [
            ("text I'll write",),
            ("text  the module.",),
            ("prep toolu_synthetic_W1 write_file",),
            (f"call toolu_synthetic_W1 write_file {GREET_JSON}",),
            ("finish STOP", "usage 1290/131"),
        ],
        None,
    ),
    "anthropic-synthetic-midstream-overloaded-error.sse": (
        [
            ("prep toolu_synthetic_C get_weather",),
        ],
        ("overloaded", True, "Overloaded"),
    ),
    "anthropic-synthetic-thinking-text-parallel-tools.sse": (
        [
            ("thought The user wants weather for two cities.",),
            ("thought  I'll call get_weather twice.",),
            ("thought  sig=c3ludGhldGljLXNpZ25hdHVyZS1ub3QtcmVhbA==",),
            ("text I'll check both cities.",),
            ("prep toolu_synthetic_A get_weather",),
            ('call toolu_synthetic_A get_weather {"location": "Paris"}',),
            ("prep toolu_synthetic_B get_weather",),
            ('call toolu_synthetic_B get_weather {"location": "Tokyo"}',),
            ("finish STOP", "usage 512/97"),
        ],
        None,
    ),
    "openai-groq-tool-use-failed-in-stream.sse": (
        [],
        (
            "malformed",
            True,
            "the provider could not read the model's tool call (tool_use_failed): Failed to "
            "call a function. Please adjust your prompt. See 'failed_generation' for more "
            "details. The model had written: 'Tool use failed: selected tool get_temperature "
            "does not match forced tool call name self_destruct'",
        ),
    ),
    "openai-oci-proxy-new-id-each-fragment.sse": (
        [
            ("prep chatcmpl-tool-a91e77be296474b3 get_weather",),
            (
                'call chatcmpl-tool-a91e77be296474b3 get_weather {"city": "Paris"}',
                "finish STOP",
            ),
        ],
        None,
    ),
    "openai-sdk-parallel-tool-calls.sse": (
        [
            ("prep call_JMW1whyEaYG438VE1OIflxA2 GetWeatherArgs",),
            ("prep call_DNYTawLBoN8fj3KN6qU9N1Ou get_stock_price",),
            (
                'call call_JMW1whyEaYG438VE1OIflxA2 GetWeatherArgs {"city": "Edinburgh", "country": "GB", "units": "c"}',
                'call call_DNYTawLBoN8fj3KN6qU9N1Ou get_stock_price {"exchange": "NASDAQ", "ticker": "AAPL"}',
                "finish STOP",
            ),
            ("usage 149/60",),
        ],
        None,
    ),
    "openai-sdk-single-tool-call.sse": (
        [
            ("prep call_c91SqDXlYFuETYv8mUHzz6pp GetWeatherArgs",),
            (
                'call call_c91SqDXlYFuETYv8mUHzz6pp GetWeatherArgs {"city": "Edinburgh", "country": "UK", "units": "c"}',
                "finish STOP",
            ),
            ("usage 76/24",),
        ],
        None,
    ),
    "openai-sdk-text-finish-length.sse": (
        [
            ('text {"',),
            ("finish MAX_TOKENS",),
            ("usage 79/1",),
        ],
        None,
    ),
    "openai-synthetic-arguments-cut-finish-stop.sse": (
        [("prep call_s10 get_weather",)],
        (
            "malformed",
            True,
            "tool call call_s10 (get_weather): arguments are not valid JSON (unexpected end of "
            "data: line 1 column 14 (char 13)), although the server ended the reply with "
            "finish_reason 'stop'",
        ),
    ),
    "openai-synthetic-call-without-name.sse": (
        [
            ("prep call_named get_weather",),
            (
                'call call_named get_weather {"city": "Paris"}',
                'call call_nameless  {"city": "Oslo"}',
                "finish STOP",
            ),
        ],
        None,
    ),
    "openai-synthetic-empty-string-id-and-name.sse": (
        [
            ("prep chatcmpl-tool-abc123 get_weather",),
            ('call chatcmpl-tool-abc123 get_weather {"city": "Paris"}', "finish STOP"),
        ],
        None,
    ),
    "openai-synthetic-id-and-name-repeated-every-chunk.sse": (
        [
            ("prep call_s1 get_weather",),
            ('call call_s1 get_weather {"city": "Paris"}', "finish STOP"),
        ],
        None,
    ),
    "openai-synthetic-midstream-error.sse": (
        [
            ("prep call_s9 get_weather",),
        ],
        ("server", True, "The server had an error while processing your request."),
    ),
    "openai-synthetic-missing-index-gemini-style.sse": (
        [
            ("prep function-call-1 get_weather",),
            (
                "thought  sig=c2lnbmF0dXJl",
                'call function-call-1 get_weather {"city": "Paris"}',
                "finish STOP",
                "usage 50/10",
            ),
        ],
        None,
    ),
    "openai-synthetic-whole-call-one-chunk.sse": (
        [
            (
                "prep call_ejieksiz get_weather",
                'call call_ejieksiz get_weather {"city": "Paris"}',
                "finish STOP",
            ),
        ],
        None,
    ),
}

TOOLS = tuple(
    ToolDeclaration(name, f"{name} tool")
    for name in ("get_weather", "GetWeatherArgs", "get_stock_price")
)


def _request(with_tools: bool) -> ModelRequest:
    return ModelRequest(
        model="test-model",
        history=(Content("user", (TextPart("What's the weather?"),)),),
        tools=TOOLS if with_tools else (),
    )


def test_every_fixture_has_an_expectation() -> None:
    names = sorted(p.name for p in FIXTURES.glob("*.sse"))
    assert names, f"no fixtures found in {FIXTURES}"
    assert names == sorted(EXPECTED)


@pytest.mark.parametrize("with_tools", [False, True], ids=["no-tools", "declared-tools"])
@pytest.mark.parametrize("fixture", sorted(EXPECTED))
def test_fixture_replays_through_sdk(fixture: str, with_tools: bool) -> None:
    expected_chunks, expected_error = EXPECTED[fixture]
    with FakeProviderServer() as server:
        server.enqueue(ScriptedResponse.from_fixture(FIXTURES / fixture))
        provider: Provider
        if fixture.startswith("anthropic"):
            provider = anthropic_provider(server.base_url)
        else:
            provider = openai_provider(server.base_url)
        chunks, error = collect(provider, _request(with_tools))
    assert summarize_all(chunks) == expected_chunks
    if expected_error is None:
        assert error is None
    else:
        assert error is not None
        assert (error.kind, error.retryable, error.message) == expected_error
