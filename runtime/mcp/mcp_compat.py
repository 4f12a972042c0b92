"""The private modules of the ``mcp`` SDK the MCP client uses, and only here.

The SDK's transports yield a pair of streams whose type it names only in a private
module (``mcp.client._transport.TransportStreams``), and the HTTP client its transports
build by default, with its timeouts, lives in ``mcp.shared._httpx_utils``: the
public-only client copies those timeouts, and the any-address policy uses the SDK's
own factory. ``tests/runtime/test_mcp_compat_contract.py`` checks them against the installed
SDK and fails, naming ``mcp`` and its version, on an upgrade that moves or changes them.
"""

from __future__ import annotations

import httpx2
from mcp.client._transport import TransportStreams
from mcp.shared._httpx_utils import (
    MCP_DEFAULT_SSE_READ_TIMEOUT,
    MCP_DEFAULT_TIMEOUT,
    create_mcp_http_client,
)

__all__ = ["TransportStreams", "default_timeout", "sdk_http_client"]


def default_timeout() -> httpx2.Timeout:
    """The timeouts the SDK's HTTP transports use by default: one for connect, write and
    pool, a longer one for reads (a server may hold an event stream open)."""
    return httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT)


sdk_http_client = create_mcp_http_client
"""The HTTP client the SDK's transports build by default (the SDK's own function); fits
``sse_client``'s ``httpx_client_factory``."""
