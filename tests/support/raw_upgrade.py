"""WebSocket upgrade requests written byte by byte, the way a hostile client may write them.

A WebSocket library's client would normalize or refuse what these tests
send (two ``Authorization`` headers, a latin-1 byte, a foreign ``Host``),
so the requests are written on a plain socket and the answer's status line
and body read back.
"""

from __future__ import annotations

import base64
import os
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["Answer", "address_of", "request_bytes", "upgrade"]

_STATUS = re.compile(rb"HTTP/1\.1 (\d{3}) ")
_LENGTH = re.compile(rb"\r\ncontent-length: *(\d+)\r\n", re.IGNORECASE)


@dataclass(frozen=True)
class Answer:
    status: int
    head: bytes
    body: bytes


def address_of(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None, url
    return parts.hostname, parts.port


def request_bytes(
    url: str, headers: Sequence[tuple[str, str | bytes]], *, host: str | bytes | None = None
) -> bytes:
    """An upgrade request for ``url``'s path with ``headers`` after the WebSocket ones.

    ``host`` replaces the ``Host`` header (``b""`` leaves it out).
    """
    name, port = address_of(url)
    path = urlsplit(url).path
    key = base64.b64encode(os.urandom(16)).decode()
    lines: list[bytes] = [f"GET {path} HTTP/1.1".encode()]
    host_value = f"{name}:{port}" if host is None else host
    if host_value:
        lines.append(b"Host: " + _bytes(host_value))
    lines += [
        b"Upgrade: websocket",
        b"Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}".encode(),
        b"Sec-WebSocket-Version: 13",
    ]
    lines += [name_.encode() + b": " + _bytes(value) for name_, value in headers]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _bytes(value: str | bytes) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def upgrade(
    url: str,
    headers: Sequence[tuple[str, str | bytes]] = (),
    *,
    host: str | bytes | None = None,
    timeout: float = 30.0,
) -> Answer:
    """Send the upgrade request, read the answer's head (and body, if any), close."""
    with socket.create_connection(address_of(url), timeout=timeout) as sock:
        sock.sendall(request_bytes(url, headers, host=host))
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = sock.recv(65536)
            assert chunk, f"the daemon closed without answering: {received!r}"
            received += chunk
        head, _, body = received.partition(b"\r\n\r\n")
        length = _LENGTH.search(head + b"\r\n")
        wanted = int(length.group(1)) if length else 0
        while len(body) < wanted:
            chunk = sock.recv(65536)
            assert chunk, f"the answer's body ended early: {received!r}"
            body += chunk
    status = _STATUS.match(head)
    assert status is not None, head
    return Answer(int(status.group(1)), head, body)
