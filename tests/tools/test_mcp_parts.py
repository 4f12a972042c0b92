"""The plain-data parts of MCP support: server specs, tool names, call results.

The end-to-end behaviour (a real server, the real agent) is in
``tests/acp/test_mcp.py``; these pin the rules those rely on.
"""

from __future__ import annotations

from typing import Any

import pytest

from toolprep.runtime.mcp.names import MAX_NAME_CHARS, tool_name
from toolprep.runtime.mcp.results import to_output
from toolprep.runtime.mcp.specs import HttpServer, StdioServer, parse_servers, server_id, to_acp
from toolprep.runtime.tools.base import ToolError
from toolprep.runtime.tools.environment import REDACTED, EnvironmentPolicy
from toolprep.runtime.tools.registry import provenance

Validate = Any


def test_acp_server_entries_parse_into_specs() -> None:
    specs = parse_servers(
        [
            {
                "name": "files",
                "command": "/bin/srv",
                "args": ["-v"],
                "env": [{"name": "A", "value": "1"}],
            },
            {"type": "http", "name": "web", "url": "http://h/mcp", "headers": []},
            {
                "type": "sse",
                "name": "old",
                "url": "http://h/sse",
                "headers": [{"name": "X", "value": "y"}],
            },
        ]
    )
    assert specs == (
        StdioServer("files", "/bin/srv", ("-v",), (("A", "1"),)),
        HttpServer("web", "http://h/mcp", "http"),
        HttpServer("old", "http://h/sse", "sse", (("X", "y"),)),
    )
    assert parse_servers([to_acp(spec) for spec in specs]) == specs
    assert parse_servers(None) == ()


@pytest.mark.parametrize(
    ("entry", "named"),
    [
        ({"name": "x", "args": [], "env": []}, r"mcpServers\[0\]\.command"),
        ({"command": "/bin/x", "args": [], "env": []}, r"mcpServers\[0\]\.name"),
        ({"name": "x", "command": "/bin/x", "args": [1], "env": []}, r"mcpServers\[0\]\.args"),
        ({"name": "x", "command": "c", "args": [], "env": [{"name": "A"}]}, r"env\[0\]\.value"),
        ({"type": "ws", "name": "x", "url": "ws://h"}, r"mcpServers\[0\]\.type"),
        ({"type": "http", "name": "x", "headers": []}, r"mcpServers\[0\]\.url"),
        ("echo", r"mcpServers\[0\]' must be an object"),
    ],
)
def test_malformed_entries_name_the_field(entry: Any, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        parse_servers([entry])


def test_servers_whose_tool_prefixes_would_clash_are_refused() -> None:
    entries = [
        {"name": "my server", "command": "a", "args": [], "env": []},
        {"name": "my.server", "command": "b", "args": [], "env": []},
    ]
    with pytest.raises(ValueError, match="mcp__my_server__"):
        parse_servers(entries)
    with pytest.raises(ValueError, match="no letter or digit"):
        parse_servers([{"name": "...", "command": "a", "args": [], "env": []}])


def test_env_values_stay_out_of_the_repr() -> None:
    spec = StdioServer("s", "c", (), (("TOKEN", "secret-value"),))
    assert "secret-value" not in repr(spec)
    assert "Bearer" not in repr(HttpServer("w", "http://h", "http", (("Auth", "Bearer t"),)))


def test_tool_names_fit_providers_and_keep_their_provenance() -> None:
    assert server_id("GitHub (work)") == "GitHub_work"
    assert tool_name("echo", "echo") == "mcp__echo__echo"
    dotted = tool_name("fs", "files.read")
    long_a = tool_name("srv", "a" * 80)
    long_b = tool_name("srv", "a" * 79 + "b")
    for name in (dotted, long_a, long_b):
        assert len(name) <= MAX_NAME_CHARS
        assert provenance(name) == ("mcp", name.split("__")[1])
    assert dotted.startswith("mcp__fs__files_read_")
    assert long_a != long_b


def _as_is(text: str) -> str:
    return text


def test_text_results_reach_model_and_card(acp_validate: Validate) -> None:
    output = to_output(
        {"content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
        server="echo",
        tool="echo",
        max_chars=100,
        mask=_as_is,
    )
    assert output.llm_output == "one\ntwo"
    for item in output.content:
        acp_validate("ToolCallContent", item)


def test_binary_blocks_are_described_not_pasted() -> None:
    output = to_output(
        {
            "content": [
                {"type": "image", "mimeType": "image/png", "data": "AAAA" * 10},
                {"type": "resource", "resource": {"uri": "file:///a", "blob": "AAAA"}},
            ]
        },
        server="s",
        tool="t",
        max_chars=1000,
        mask=_as_is,
    )
    assert output.llm_output.splitlines()[0] == "[image image/png, 30 bytes]"
    assert "AAAA" not in output.llm_output


def test_structured_only_results_and_caps() -> None:
    structured = to_output(
        {"content": [], "structuredContent": {"n": 1}},
        server="s",
        tool="t",
        max_chars=100,
        mask=_as_is,
    )
    assert '"n": 1' in structured.llm_output
    capped = to_output(
        {"content": [{"type": "text", "text": "x" * 50}]},
        server="s",
        tool="t",
        max_chars=10,
        mask=_as_is,
    )
    assert capped.llm_output.startswith("x" * 10 + "\n[output cut at 10 of 50 characters]")


def test_error_results_fail_the_call_with_the_servers_text() -> None:
    with pytest.raises(ToolError, match="MCP server 'echo': boom failed: it broke"):
        to_output(
            {"content": [{"type": "text", "text": "it broke"}], "isError": True},
            server="echo",
            tool="boom",
            max_chars=100,
            mask=_as_is,
        )


def test_secrets_in_a_result_are_masked_before_the_model_or_the_card_see_them() -> None:
    policy = EnvironmentPolicy.for_agent(
        configured_key="sk-provider-key-0123456789", environ={"GITHUB_TOKEN": "ghp_abcdefghijkl"}
    )
    output = to_output(
        {"content": [{"type": "text", "text": "k=sk-provider-key-0123456789 t=ghp_abcdefghijkl"}]},
        server="s",
        tool="t",
        max_chars=1000,
        mask=policy.mask,
    )
    assert output.llm_output == f"k={REDACTED} t={REDACTED}"
    assert "ghp_" not in str(output.content)
    with pytest.raises(ToolError) as failed:
        to_output(
            {"content": [{"type": "text", "text": "ghp_abcdefghijkl"}], "isError": True},
            server="s",
            tool="t",
            max_chars=1000,
            mask=policy.mask,
        )
    assert "ghp_" not in str(failed.value)
