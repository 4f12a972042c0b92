"""What crosses the worker pipes (and what the store keeps) comes back as the same typed
value, or fails clearly."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from toolprep.messages import codec as messages_codec
from toolprep.messages.codec import CodecError
from toolprep.messages.content import (
    FunctionCall,
    FunctionCallPart,
    FunctionResponse,
    FunctionResponsePart,
    Part,
    TextPart,
    ThoughtPart,
    Usage,
)
from toolprep.messages.turns import TurnResult, UserMessage
from toolprep.runtime.kernel.session_host import (
    ClientRequest,
    EditorAnswer,
    EditorFailed,
    FileRead,
    FileWritten,
    ReadTextFile,
    RequestPermission,
    WriteTextFile,
)
from toolprep.runtime.workers import codec


def _through_json(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value))


def test_parts_round_trip() -> None:
    parts: list[Part] = [
        TextPart("hi"),
        ThoughtPart("hmm", signature="sig"),
        ThoughtPart("bare"),
        FunctionCallPart(FunctionCall("c1", "read_file", {"path": "a"})),
        FunctionResponsePart(FunctionResponse("c1", "read_file", {"output": "x"}, is_error=True)),
    ]
    assert messages_codec.load_parts(_through_json(messages_codec.dump_parts(parts))) == parts


@pytest.mark.parametrize(
    "result",
    [
        TurnResult("end_turn", usage=Usage(3, 4)),
        TurnResult("cancelled"),
        TurnResult(None, error="the provider said no"),
        TurnResult(None, error="the provider said no", failure="model_request"),
        TurnResult(None, error="the message is too large", failure="prompt_too_large"),
    ],
)
def test_turn_results_round_trip(result: TurnResult) -> None:
    assert messages_codec.load_result(_through_json(messages_codec.dump_result(result))) == result


@pytest.mark.parametrize(
    "user_message",
    [None, UserMessage("msg_1", ({"type": "text", "text": "hi"}, {"type": "resource_link"}))],
)
def test_prompts_round_trip(user_message: UserMessage | None) -> None:
    parts = [TextPart("hi")]
    dumped = _through_json(messages_codec.dump_prompt(parts, user_message))
    assert messages_codec.load_prompt(dumped) == (parts, user_message)


@pytest.mark.parametrize(
    "request_",
    [
        RequestPermission("permission_1", {"toolCallId": "c1", "title": "Run ls"}),
        ReadTextFile("fs_1", "/w/a.py", line=3, limit=10),
        ReadTextFile("fs_2", "/w/a.py"),
        WriteTextFile("fs_3", "/w/a.py", "text"),
    ],
)
def test_requests_round_trip(request_: ClientRequest) -> None:
    assert codec.load_request(_through_json(codec.dump_request(request_))) == request_


@pytest.mark.parametrize("answer", [FileRead("text"), FileWritten(), EditorFailed("no buffer")])
def test_editor_answers_round_trip(answer: EditorAnswer) -> None:
    assert codec.load_answer(_through_json(codec.dump_answer(answer))) == answer


@pytest.mark.parametrize(
    ("load", "raw", "error"),
    [
        (messages_codec.load_parts, {"type": "text"}, "must be a list"),
        (messages_codec.load_parts, [{"type": "image", "data": "..."}], "not a prompt part"),
        (messages_codec.load_prompt, [{"type": "text", "text": "hi"}], "not a prompt"),
        (
            messages_codec.load_prompt,
            {"parts": [], "user_message": {"id": "msg_1", "blocks": ["hi"]}},
            "not a prompt",
        ),
        (
            messages_codec.load_result,
            {"stop_reason": "bored", "error": None, "usage": None},
            "bored",
        ),
        (
            messages_codec.load_result,
            {"stop_reason": None, "error": 3, "usage": None},
            "must be text",
        ),
        (
            messages_codec.load_result,
            {"stop_reason": None, "error": None, "usage": [1]},
            "token usage",
        ),
        (
            codec.load_request,
            {"type": "read", "id": "r", "path": "/a", "line": "3", "limit": None},
            "whole number",
        ),
        (codec.load_request, {"type": "delete", "id": "r"}, "not a client request"),
        (codec.load_answer, {"type": "read"}, "not an editor answer"),
    ],
)
def test_malformed_values_are_refused_by_name(load: Any, raw: Any, error: str) -> None:
    with pytest.raises(CodecError, match=error):
        load(raw)


def test_mcp_servers_round_trip_in_their_acp_shape() -> None:
    from toolprep.runtime.mcp.specs import HttpServer, StdioServer

    specs = (
        StdioServer("echo", "/usr/bin/python3", ("-m", "echo"), (("TOKEN", "t0k"),)),
        HttpServer("web", "http://127.0.0.1:9/mcp", "sse", (("Authorization", "Bearer x"),)),
    )
    dumped = _through_json(codec.dump_mcp_servers(specs))
    assert dumped[0]["env"] == [{"name": "TOKEN", "value": "t0k"}]
    assert codec.load_mcp_servers(dumped) == specs


def test_malformed_mcp_servers_are_a_codec_error() -> None:
    with pytest.raises(CodecError, match=r"mcp_servers\[0\]\.command"):
        codec.load_mcp_servers([{"name": "echo", "args": [], "env": []}])


def test_runtime_options_round_trip_as_a_worker_receives_them() -> None:
    import argparse

    from toolprep.runtime.cli.main import build_parser
    from toolprep.runtime.hosting.options import RuntimeOptions
    from toolprep.runtime.mcp.policy import McpPolicy

    line = "acp --provider replay --fallback-model m2 --scrub-env A --pass-env B_TOKEN"
    trust = ["--trust-mcp-server", "echo", "--trust-mcp-server", "my docs"]
    args = build_parser().parse_args([*line.split(), *trust, "--mode", "plan", "--data-dir", "/d"])
    assert isinstance(args, argparse.Namespace)
    policy = McpPolicy(any_command=False, commands=frozenset({"npx"}), any_address=True)
    options = RuntimeOptions.from_arguments(args).with_front("pid 1 on h", policy)
    assert options.fallback_model == ("m2",) and options.pass_env == ("B_TOKEN",)
    assert options.trust_mcp_server == ("echo", "my docs")
    assert codec.load_options(_through_json(codec.dump_options(options))) == options


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"max_retries": "3"}, "max_retries cannot be '3'"),
        ({"max_retries": True}, "max_retries cannot be True"),
        ({"scrub_env": ["A", 3]}, "as text"),
        ({"trust_mcp_server": [None]}, "as text"),
        ({"mcp_policy": {"any_command": "yes"}}, "not an MCP policy"),
        ({"surprise": 1}, "not runtime options"),
    ],
)
def test_malformed_runtime_options_are_refused_by_name(change: dict[str, Any], error: str) -> None:
    from toolprep.runtime.hosting.options import RuntimeOptions

    raw = {**codec.dump_options(RuntimeOptions()), **change}
    with pytest.raises(CodecError, match=error):
        codec.load_options(raw)
