"""History -> wire format, checked on the JSON body the loopback server actually received."""

from __future__ import annotations

from typing import Any

import pytest

from tests.providers.helpers import anthropic_provider, collect, openai_provider
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
from toolprep.runtime.providers.base import ModelRequest, ToolDeclaration
from toolprep.runtime.providers.openai_provider import OpenAIProvider, build_chat_params
from toolprep.testing import (
    FakeProviderServer,
    ScriptedResponse,
    anthropic_sse,
    openai_sse,
)

READ = ToolDeclaration(
    "read_file",
    "Read a file",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
GLOB = ToolDeclaration("glob", "Find files")

HISTORY = (
    Content("user", (TextPart("Look at a.txt and b.txt"),)),
    Content(
        "model",
        (
            ThoughtPart("I should read both", "SIG1"),
            ThoughtPart("unsigned musing"),
            TextPart("Reading them."),
            FunctionCallPart(FunctionCall("call_a", "read_file", {"path": "a.txt"})),
            FunctionCallPart(FunctionCall("call_b", "read_file", {"path": "b.txt"})),
        ),
    ),
    Content(
        "user",
        (
            FunctionResponsePart(FunctionResponse("call_a", "read_file", {"output": "alpha"})),
            FunctionResponsePart(
                FunctionResponse("call_b", "read_file", {"error": "no such file"}, is_error=True)
            ),
        ),
    ),
    Content("model", (TextPart("a.txt says alpha; b.txt is missing."),)),
    Content("user", (TextPart("Thanks. Any "), TextPart("globs?"))),
)

REQUEST = ModelRequest(
    model="model-x", history=HISTORY, system="Be brief.", tools=(READ, GLOB), max_tokens=321
)


def _received(provider_name: str, request: ModelRequest) -> Any:
    with FakeProviderServer() as server:
        if provider_name == "anthropic":
            server.enqueue(ScriptedResponse(anthropic_sse(text="ok")))
            _, error = collect(anthropic_provider(server.base_url), request)
        else:
            server.enqueue(ScriptedResponse(openai_sse(text="ok")))
            _, error = collect(openai_provider(server.base_url), request)
        assert error is None
        (received,) = server.requests
    return received


def test_anthropic_request_body() -> None:
    received = _received("anthropic", REQUEST)
    assert received.path == "/v1/messages"
    assert received.headers["authorization"] == "Bearer test-key"
    assert received.body == {
        "model": "model-x",
        "max_tokens": 321,
        "stream": True,
        "system": "Be brief.",
        "tools": [
            {
                "name": "read_file",
                "description": "Read a file",
                "input_schema": READ.parameters,
                "eager_input_streaming": True,
            },
            {
                "name": "glob",
                "description": "Find files",
                "input_schema": {"type": "object", "properties": {}},
                "eager_input_streaming": True,
            },
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Look at a.txt and b.txt"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "I should read both", "signature": "SIG1"},
                    {"type": "text", "text": "Reading them."},
                    {
                        "type": "tool_use",
                        "id": "call_a",
                        "name": "read_file",
                        "input": {"path": "a.txt"},
                    },
                    {
                        "type": "tool_use",
                        "id": "call_b",
                        "name": "read_file",
                        "input": {"path": "b.txt"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_a",
                        "content": "alpha",
                        "is_error": False,
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_b",
                        "content": "no such file",
                        "is_error": True,
                    },
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "a.txt says alpha; b.txt is missing."}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Thanks. Any "},
                    {"type": "text", "text": "globs?"},
                ],
            },
        ],
    }


def test_openai_request_body() -> None:
    received = _received("openai", REQUEST)
    assert received.path == "/v1/chat/completions"
    assert received.body == {
        "model": "model-x",
        "max_tokens": 321,
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "read_file",
                    "description": "Read a file",
                    "parameters": READ.parameters,
                },
            },
            {
                "type": "function",
                "function": {
                    "name": "glob",
                    "description": "Find files",
                    "parameters": {"type": "object", "properties": {}},
                },
            },
        ],
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Look at a.txt and b.txt"},
            {
                "role": "assistant",
                "content": "Reading them.",
                "tool_calls": [
                    # a thought signature rides on the call it precedes (Gemini's OpenAI dialect)
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path":"a.txt"}'},
                        "extra_content": {"google": {"thought_signature": "SIG1"}},
                    },
                    {
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path":"b.txt"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_a", "content": "alpha"},
            {"role": "tool", "tool_call_id": "call_b", "content": "no such file"},
            {"role": "assistant", "content": "a.txt says alpha; b.txt is missing."},
            {"role": "user", "content": "Thanks. Any globs?"},
        ],
    }


ORPHAN = (
    Content("user", (TextPart("go"),)),
    Content(
        "model",
        (
            FunctionCallPart(FunctionCall("call_x", "glob", {"pattern": "*"})),
            FunctionCallPart(FunctionCall("call_y", "glob", {"pattern": "?"})),
        ),
    ),
    Content("user", (FunctionResponsePart(FunctionResponse("call_x", "glob", {"output": "a"})),)),
    Content("user", (TextPart("never mind, stop"),)),
)


def test_anthropic_answers_calls_left_without_a_result() -> None:
    messages = _received("anthropic", ModelRequest(model="m", history=ORPHAN)).body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert [
        (b["type"], b.get("tool_use_id"), b.get("is_error")) for b in messages[2]["content"]
    ] == [("tool_result", "call_y", True), ("tool_result", "call_x", False), ("text", None, None)]


def test_openai_answers_calls_left_without_a_result() -> None:
    messages = _received("openai", ModelRequest(model="m", history=ORPHAN)).body["messages"]
    assert [(m["role"], m.get("tool_call_id")) for m in messages] == [
        ("user", None),
        ("assistant", None),
        ("tool", "call_x"),
        ("tool", "call_y"),
        ("user", None),
    ]


def test_tool_results_lead_their_user_message() -> None:
    history = (
        Content("user", (TextPart("go"),)),
        Content("model", (FunctionCallPart(FunctionCall("call_x", "glob", {})),)),
        Content(
            "user",
            (
                TextPart("and also this"),
                FunctionResponsePart(FunctionResponse("call_x", "glob", {"output": "a"})),
            ),
        ),
    )
    messages = _received("anthropic", ModelRequest(model="m", history=history)).body["messages"]
    assert [b["type"] for b in messages[2]["content"]] == ["tool_result", "text"]
    openai_messages = build_chat_params(ModelRequest(model="m", history=history))["messages"]
    assert [m["role"] for m in openai_messages] == ["user", "assistant", "tool", "user"]


def test_redacted_thinking_goes_back_as_its_own_block_type() -> None:
    history = (
        Content("user", (TextPart("q"),)),
        Content("model", (ThoughtPart("", REDACTED_THINKING_PREFIX + "ENCRYPTED"), TextPart("a"))),
        Content("user", (TextPart("q2"),)),
    )
    messages = _received("anthropic", ModelRequest(model="m", history=history)).body["messages"]
    assert messages[1]["content"][0] == {"type": "redacted_thinking", "data": "ENCRYPTED"}


def test_gemini_thought_signature_goes_back_on_its_call() -> None:
    history = (
        Content("user", (TextPart("q"),)),
        Content(
            "model", (ThoughtPart("", "GSIG"), FunctionCallPart(FunctionCall("fc-1", "glob", {})))
        ),
        Content("user", (FunctionResponsePart(FunctionResponse("fc-1", "glob", {"output": "x"})),)),
    )
    messages = build_chat_params(ModelRequest(model="m", history=history))["messages"]
    assert messages[1]["tool_calls"][0]["extra_content"] == {
        "google": {"thought_signature": "GSIG"}
    }


def test_rich_tool_results_are_sent_as_json() -> None:
    history = (
        Content("user", (TextPart("q"),)),
        Content("model", (FunctionCallPart(FunctionCall("c1", "glob", {})),)),
        Content(
            "user",
            (FunctionResponsePart(FunctionResponse("c1", "glob", {"files": ["a", "b"], "n": 2})),),
        ),
    )
    messages = build_chat_params(ModelRequest(model="m", history=history))["messages"]
    assert messages[2] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": '{"files":["a","b"],"n":2}',
    }


@pytest.mark.parametrize(
    ("base_url", "field"),
    [
        ("https://api.openai.com/v1", "max_completion_tokens"),
        ("http://localhost:11434/v1", "max_tokens"),
    ],
)
def test_max_tokens_field_follows_the_endpoint(base_url: str, field: str) -> None:
    import openai

    provider = OpenAIProvider(openai.AsyncOpenAI(base_url=base_url, api_key="k"))
    assert provider.max_tokens_field == field
    params = build_chat_params(REQUEST, max_tokens_field=provider.max_tokens_field)
    assert params[field] == 321
