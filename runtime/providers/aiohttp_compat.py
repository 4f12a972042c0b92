"""The undocumented parts of aiohttp the read deadlines use, and only here.

``read_deadline`` takes a body's read timeout over from aiohttp (one sweep per loop
instead of a timer re-armed on every read). For that it switches off the timer of the
response's connection protocol (``ResponseHandler.read_timeout``, an internal class), reads
the byte count aiohttp keeps on the body (``StreamReader.total_bytes``) and fails the body
the way aiohttp's own timer does (``StreamReader.set_exception``): none of them in aiohttp's
documented API. Each is one plain call, per response or per sweep, never per read.
``tests/providers/test_aiohttp_compat_contract.py`` checks them on a real connection and
fails, naming aiohttp and its version, when an upgrade breaks one.
"""

from __future__ import annotations

import aiohttp

__all__ = ["body_bytes_received", "fail_body", "stop_read_timer"]


def stop_read_timer(response: aiohttp.ClientResponse) -> None:
    """Stop aiohttp re-arming ``sock_read``'s timer on every read of ``response``'s body.

    The timer armed last (the headers') still runs until the next read cancels it, so a
    body that never starts fails by aiohttp's own timer, with the same error.
    """
    connection = response.connection
    if connection is not None and connection.protocol is not None:
        connection.protocol.read_timeout = None


def body_bytes_received(response: aiohttp.ClientResponse) -> int:
    """How many bytes of ``response``'s body aiohttp has received so far (read or not)."""
    return response.content.total_bytes


def fail_body(response: aiohttp.ClientResponse, error: BaseException) -> None:
    """Make the pending and every later read of ``response``'s body raise ``error``."""
    response.content.set_exception(error)
