"""The contract every provider offers the StreamReader.

A provider turns a ``ModelRequest`` into an async stream of
``GenerateContentResponse`` chunks. Any failure after the request was sent,
in-band or on the wire, surfaces as one ``StreamError`` so the supervisor can
decide between retry, fallback and giving up without knowing the provider.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from toolprep.messages.content import GenerateContentResponse
from toolprep.messages.requests import ModelRequest, StreamError, ToolDeclaration

__all__ = ["ModelRequest", "Provider", "StreamError", "ToolDeclaration"]


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
