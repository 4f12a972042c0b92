"""The HTTP client MCP servers get without ``--allow-mcp-network`` judges every request.

A real HTTP server on loopback stands for an internal service: a plain
client reaches it, the guarded one sends it nothing, whether the URL names
the address or a host name that resolves to it (as a name rebound after
the session's check would).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import httpx2
import pytest

from toolprep.runtime.mcp.guarded_http import public_only_client


class _Counting(BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Counting.seen.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def internal_port() -> Iterator[int]:
    _Counting.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


async def test_an_internal_address_gets_no_request(internal_port: int) -> None:
    async with httpx2.AsyncClient(trust_env=False) as plain:
        assert (await plain.get(f"http://127.0.0.1:{internal_port}/plain")).text == "ok"
    async with public_only_client() as guarded:
        for host in ("127.0.0.1", "localhost", "[::ffff:127.0.0.1]"):
            with pytest.raises(httpx2.ConnectError, match="a loopback address"):
                await guarded.get(f"http://{host}:{internal_port}/guarded")
    assert _Counting.seen == ["/plain"]
