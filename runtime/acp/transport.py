"""How JSON-RPC messages travel: the one interface a :class:`JsonRpcConnection` reads and writes.

The connection owns the protocol (ids, handlers, ordering); a transport owns
the framing. Newline-delimited JSON on a pair of byte streams (an agent's
stdio, :class:`LineTransport`) and one message per WebSocket text frame
(``toolprep serve``) differ only here, so both get the same error replies,
the same size limit and the same ordering.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = ["MessageTransport", "PacedTransport", "SkippedMessage"]


@dataclass(frozen=True, slots=True)
class SkippedMessage:
    """A message over the transport's size limit, dropped unread.

    ``size`` and ``response_id`` are known when the transport could follow
    the message to its end: ``response_id`` names the local request a
    skipped *response* answered, so that request fails at once instead of
    waiting for a reply that will never be read.
    """

    size: int | None = None
    response_id: int | None = None


class MessageTransport(Protocol):
    """Framing for one peer. ``incoming`` is iterated by the connection's reader thread
    only; ``write`` and ``write_many`` are called under the connection's write lock."""

    max_message_bytes: int

    def incoming(self) -> Iterator[bytes | SkippedMessage]:
        """Each message's bytes in arrival order; ends when the peer is gone."""
        ...

    def encode(self, message: Mapping[str, Any]) -> bytes:
        """The message as this transport writes it; ``TypeError`` if not serialisable."""
        ...

    def write(self, data: bytes) -> None:
        """Send one encoded message; ``OSError`` or ``ValueError`` once the peer is gone."""
        ...

    def write_many(self, messages: Sequence[bytes]) -> None:
        """Send several encoded messages in order, in one write where the framing allows;
        fails as ``write`` does."""
        ...

    def close_output(self) -> None:
        """Stop sending (the peer sees the end); must not raise."""
        ...


@runtime_checkable
class PacedTransport(Protocol):
    """A transport whose ``write`` never waits but buffers up to a limit (a WebSocket):
    a writer that may wait asks for room first, rather than overflowing the buffer."""

    def wait_for_room(self, nbytes: int, timeout: float) -> bool:
        """True once ``nbytes`` more fit; False after ``timeout`` or once closed."""
        ...
