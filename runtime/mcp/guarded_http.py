"""An HTTP client for MCP servers that reaches public addresses only, at every request.

``McpPolicy.check`` refuses an internal URL when the session opens, but the
SDK resolves the host again when it connects, and again for each new
connection: a name that resolved to a public address at the check could
resolve to ``127.0.0.1`` a moment later (DNS rebinding). So, unless the
agent allows any address, each request's host is resolved here, every
address it resolves to is judged (``policy.address_refusal``), and the
request is sent to the first of those addresses: its ``Host`` header and
the TLS server name (``sni_hostname``, which certificate checks use too)
stay the URL's own. Proxies from the environment are not used, since a
proxy would reach what this refuses on our behalf.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any

import httpx2

from toolprep.runtime.mcp.mcp_compat import default_timeout
from toolprep.runtime.mcp.policy import address_refusal

__all__ = ["PublicOnlyTransport", "public_only_client"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


class PublicOnlyTransport(httpx2.AsyncBaseTransport):
    """Sends each request to an address its host resolves to, once every such address passed."""

    def __init__(self) -> None:
        self._inner = httpx2.AsyncHTTPTransport(trust_env=False)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        host = url.host
        address = await _judged_address(host, url.port or _DEFAULT_PORTS.get(url.scheme, 0))
        if address != host:
            request.extensions["sni_hostname"] = host
            request.url = url.copy_with(host=address)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


async def _judged_address(host: str, port: int) -> str:
    """The first address ``host`` resolves to; ``httpx2.ConnectError`` if any is internal."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
            )
        except (OSError, UnicodeError) as exc:
            raise httpx2.ConnectError(f"cannot resolve {host!r}: {exc}") from None
        addresses = [str(info[4][0]) for info in infos]
    else:
        addresses = [host]
    if not addresses:
        raise httpx2.ConnectError(f"{host!r} resolves to no address")
    for address in addresses:
        refusal = address_refusal(address)
        if refusal is not None:
            raise httpx2.ConnectError(
                f"{host!r} resolves to {address}, {refusal}: refused without --allow-mcp-network"
            )
    return addresses[0]


def public_only_client(
    headers: dict[str, str] | None = None,
    timeout: httpx2.Timeout | None = None,
    auth: httpx2.Auth | None = None,
) -> httpx2.AsyncClient:
    """Like the SDK's ``create_mcp_http_client`` (same timeouts), over ``PublicOnlyTransport``;
    fits ``sse_client``'s ``httpx_client_factory``."""
    options: dict[str, Any] = {
        "timeout": timeout or default_timeout(),
        "transport": PublicOnlyTransport(),
        "trust_env": False,
    }
    if headers is not None:
        options["headers"] = headers
    if auth is not None:
        options["auth"] = auth
    return httpx2.AsyncClient(**options)
