"""What one model attempt asks for, and the one way it can fail.

These travel between the supervisor, the stream reader and the providers as message
payloads, so they live with the other messages: providers depend on them, never the
other way round.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from toolprep.messages.content import Content


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
    conversation: str | None = None
    """Whose conversation this request continues (the session id), for a provider that keeps
    state per conversation: the replay provider plays each session its own script. SDK
    providers send nothing of it."""


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
