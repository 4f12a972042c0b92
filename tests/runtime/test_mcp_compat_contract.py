"""The contract of ``runtime/mcp/mcp_compat.py`` with the installed ``mcp`` SDK.

The private names exist, the stream pair type is the one the SDK's transports yield, and
the SDK's default HTTP client is built with the timeouts the public-only client copies.
An SDK upgrade that moves or changes one fails here, naming ``mcp`` and its version.
"""

from __future__ import annotations

import asyncio
import inspect
import typing

import httpx2
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from tests.support.contract import broken
from toolprep.runtime.mcp.guarded_http import public_only_client
from toolprep.runtime.mcp.mcp_compat import TransportStreams, default_timeout, sdk_http_client

COMPAT = "runtime/mcp/mcp_compat.py"


def test_transport_streams_is_the_pair_the_sdks_transports_yield() -> None:
    assert typing.get_origin(TransportStreams) is tuple, broken(
        "mcp", COMPAT, f"TransportStreams is {TransportStreams!r}, not a tuple type"
    )
    assert len(typing.get_args(TransportStreams)) == 2, broken(
        "mcp", COMPAT, "TransportStreams is no longer a (read, write) pair"
    )
    yielded = typing.get_args(typing.get_type_hints(streamable_http_client)["return"])
    assert yielded and yielded[0] == TransportStreams, broken(
        "mcp", COMPAT, f"streamable_http_client yields {yielded!r}, not TransportStreams"
    )


def test_the_sdk_http_client_has_the_default_timeouts_and_fits_the_factory_slot() -> None:
    async def build() -> httpx2.Timeout:
        async with sdk_http_client(headers={"x-probe": "1"}) as client:
            assert client.headers["x-probe"] == "1"
            return client.timeout

    timeout = asyncio.run(build())

    assert timeout == default_timeout(), broken(
        "mcp", COMPAT, f"the SDK's client has timeouts {timeout!r}, not {default_timeout()!r}"
    )
    read, connect = default_timeout().read, default_timeout().connect
    assert read is not None and connect is not None and read > connect, broken(
        "mcp", COMPAT, "the default read timeout is no longer the longer one"
    )
    factory = inspect.signature(sse_client).parameters.get("httpx_client_factory")
    assert factory is not None, broken("mcp", COMPAT, "sse_client takes no httpx_client_factory")
    wanted = ["headers", "timeout", "auth"]
    for build_client in (sdk_http_client, public_only_client):
        params = list(inspect.signature(build_client).parameters)
        assert params == wanted, broken(
            "mcp", COMPAT, f"{build_client.__name__} takes {params}, not the factory's {wanted}"
        )
