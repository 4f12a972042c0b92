"""The contract every provider offers the StreamReader.

A provider turns a ``ModelRequest`` into an async stream of
``GenerateContentResponse`` chunks. Any failure after the request was sent,
in-band or on the wire, surfaces as one ``StreamError`` so the supervisor can
decide between retry, fallback and giving up without knowing the provider.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from toolprep.messages.content import Content, GenerateContentResponse


@dataclass(frozen=True, slots=True)
class ToolDeclaration:
    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """Everything needed for one model attempt, in provider-neutral form."""

    model: str
    history: tuple[Content, ...]
    system: str | None = None
    tools: tuple[ToolDeclaration, ...] = ()
    max_tokens: int = 4096


class StreamError(Exception):
    """A model stream that did not end normally.

    ``retryable`` is true for overload, rate limits, 5xx and transport
    failures (cut connection, read timeout, missing terminal marker): a new
    attempt may succeed. ``retry_after`` is the provider's hint in seconds.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        kind: str = "stream",
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.kind = kind
        self.status = status
        self.retry_after = retry_after

    def __repr__(self) -> str:
        return (
            f"StreamError({self.message!r}, retryable={self.retryable}, kind={self.kind!r}, "
            f"status={self.status!r}, retry_after={self.retry_after!r})"
        )


class Provider(Protocol):
    """A model backend. ``stream`` is an async generator; closing it closes the HTTP response."""

    name: str

    def stream(self, request: ModelRequest) -> AsyncIterator[GenerateContentResponse]: ...

    async def aclose(self) -> None:
        """Release the SDK client's pooled connections.

        Called once at shutdown, on the loop that streamed: the pool's sockets belong to
        that loop, and left open they would outlive the runtime that owns them.
        """
        ...
