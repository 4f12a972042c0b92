"""``McpPolicy``: every address a host resolves to is judged, and the policy crosses processes.

The resolver passed in stands for DNS, so a name resolving to several
addresses, one of them internal, can be had without a DNS server.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from toolprep.runtime.mcp.policy import McpPolicy, McpRefused, Resolver
from toolprep.runtime.mcp.specs import HttpServer, StdioServer


def _resolving_to(*addresses: str) -> tuple[list[tuple[str, int]], Resolver]:
    asked: list[tuple[str, int]] = []

    def resolve(host: str, port: int) -> Sequence[str]:
        asked.append((host, port))
        return addresses

    return asked, resolve


def test_one_internal_address_among_public_ones_refuses_the_url() -> None:
    asked, resolve = _resolving_to("93.184.216.34", "2606:4700::1111", "10.0.0.7")
    with pytest.raises(McpRefused, match=r"reaches 10\.0\.0\.7, a private address"):
        McpPolicy().check([HttpServer("web", "https://mcp.example.com/mcp")], resolve)
    assert asked == [("mcp.example.com", 443)]


def test_public_addresses_only_pass() -> None:
    asked, resolve = _resolving_to("93.184.216.34", "2606:4700::1111")
    McpPolicy().check([HttpServer("web", "http://mcp.example.com:8080/mcp")], resolve)
    assert asked == [("mcp.example.com", 8080)]


def test_a_name_that_resolves_to_nothing_is_refused() -> None:
    _, resolve = _resolving_to()
    with pytest.raises(McpRefused, match="resolves to no address"):
        McpPolicy().check([HttpServer("web", "http://mcp.example.com/")], resolve)


def test_allow_mcp_network_resolves_nothing() -> None:
    asked, resolve = _resolving_to("127.0.0.1")
    McpPolicy(any_address=True).check([HttpServer("web", "http://anything/")], resolve)
    assert asked == []


def test_commands_match_exactly_not_by_basename() -> None:
    policy = McpPolicy(commands=frozenset({"npx"}))
    policy.check([StdioServer("ok", "npx", ("-y", "server"))])
    with pytest.raises(McpRefused, match="--allow-mcp-command /tmp/upload/npx"):
        policy.check([StdioServer("lookalike", "/tmp/upload/npx")])


def test_the_options_form_round_trips_and_absent_means_nothing_allowed() -> None:
    policy = McpPolicy(any_command=False, commands=frozenset({"uvx", "npx"}), any_address=True)
    assert McpPolicy.from_options(policy.to_options()) == policy
    assert McpPolicy.from_options(McpPolicy.trusted().to_options()) == McpPolicy.trusted()
    assert McpPolicy.from_options(None) == McpPolicy()
    with pytest.raises(ValueError, match="not an MCP policy"):
        McpPolicy.from_options({"any_command": "yes", "any_address": False})
