"""A response body that stops moving fails after the read timeout, checked by one sweep per loop.

aiohttp enforces ``sock_read`` by re-arming a loop timer on every socket read:
a cancelled handle and a new one per provider event, which measured about a
sixth of the stream loop's CPU at 1000 sessions. Yet a body's progress is
already counted, by aiohttp itself (``StreamReader.total_bytes``). So once an
answer's headers are in (waiting for them keeps aiohttp's own timeout), its
connection's per-read timer is switched off and the body is watched here
(aiohttp's internals for this are reached through ``aiohttp_compat``): a sweep
every ``interval`` seconds compares each open body's byte count with the count
it saw last, and a body that has not moved for ``timeout`` seconds fails
with the very error aiohttp raises for it (``SocketTimeoutError``, "Timeout on
reading data from socket"), so what a caller sees does not change. A stall is
caught no sooner than ``timeout`` after the last byte and no later than
``timeout + 2 * interval``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from toolprep.runtime.providers.aiohttp_compat import (
    body_bytes_received,
    fail_body,
    stop_read_timer,
)

__all__ = ["TIMEOUT_MESSAGE", "ReadDeadlines"]

TIMEOUT_MESSAGE = "Timeout on reading data from socket"
"""aiohttp's own words for a read that timed out."""

_MAX_INTERVAL_S = 1.0


@dataclass(slots=True)
class _Progress:
    bytes_seen: int
    moved_at: float


class ReadDeadlines:
    """The open bodies of one event loop whose reads share one timeout.

    Used only on that loop's thread, so it needs no lock.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        if timeout <= 0:
            raise ValueError(f"a read timeout must be positive, not {timeout}")
        self.timeout = timeout
        self.interval = min(_MAX_INTERVAL_S, timeout / 4)
        self._loop = loop
        self._bodies: dict[aiohttp.ClientResponse, _Progress] = {}
        self._sweep_handle: asyncio.TimerHandle | None = None

    def watch(self, response: aiohttp.ClientResponse) -> Callable[[], None]:
        """Take over ``response``'s read timeout; returns what stops watching it."""
        # The headers' timer still runs until the next read cancels it: a body that
        # never starts fails by aiohttp's own timer, with the same error.
        stop_read_timer(response)
        self._bodies[response] = _Progress(body_bytes_received(response), self._loop.time())
        if self._sweep_handle is None:
            self._sweep_handle = self._loop.call_later(self.interval, self._sweep)
        return lambda: self._forget(response)

    def _forget(self, response: aiohttp.ClientResponse) -> None:
        self._bodies.pop(response, None)
        if not self._bodies and self._sweep_handle is not None:
            self._sweep_handle.cancel()
            self._sweep_handle = None

    def _sweep(self) -> None:
        now = self._loop.time()
        stalled: list[aiohttp.ClientResponse] = []
        for response, progress in self._bodies.items():
            seen = body_bytes_received(response)
            if seen != progress.bytes_seen:
                progress.bytes_seen, progress.moved_at = seen, now
            elif now - progress.moved_at >= self.timeout:
                stalled.append(response)
        for response in stalled:
            del self._bodies[response]
            fail_body(response, aiohttp.SocketTimeoutError(TIMEOUT_MESSAGE))
        self._sweep_handle = (
            self._loop.call_later(self.interval, self._sweep) if self._bodies else None
        )
