"""Anthropic Messages provider: the official SDK's client settings, our POST and adapter.

The request goes out over aiohttp (``DirectPost``) with the URL, headers
and timeouts of the SDK client, and a failed answer raises the SDK's own
exception class and message (mapped on to ``StreamError``).

``build_messages_params`` turns provider-neutral history into the Messages
API shape: user/model turns become user/assistant messages (consecutive
turns of one role merged, since the API wants them alternating), thoughts
with a signature are echoed back as ``thinking`` (or ``redacted_thinking``)
blocks, calls as ``tool_use`` and tool results as ``tool_result`` blocks
(first in their user message, as the API requires). Thoughts without a
signature cannot be sent back and are dropped. A ``tool_use`` left without
a result (a turn cancelled mid-tools) gets an error result, because the
API rejects such a history outright and the session would be stuck.

Every tool is declared with ``eager_input_streaming: true`` (fine-grained
tool streaming) unless the provider is built with that switched off. Without
it the API buffers a tool's input to validate it as JSON, so a long argument
(a file's contents) arrives in one piece when the model has finished it;
with it the fragments arrive as the model writes them. The card does not
wait for either: it opens at the ``tool_use`` opener and the call runs once
its input is complete. The per-tool field is what the current API documents
(fine-grained streaming is generally available, no beta header) and what the
SDK's ``ToolParam.eager_input_streaming`` declares; the older
``fine-grained-tool-streaming-2025-05-14`` beta header is not sent. Some
Anthropic-compatible servers reject unknown fields in a tool, which is why
it can be turned off. The price of eager input is that the API no longer
checks the JSON: an input cut by ``max_tokens`` ends mid-value, which the
stream adapter turns into no call at all (see ``AnthropicStreamAdapter``).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

import httpx2

from toolprep.messages.content import (
    Content,
    FunctionCallPart,
    FunctionResponsePart,
    GenerateContentResponse,
    TextPart,
    ThoughtPart,
)
from toolprep.runtime.providers.anthropic_adapter import (
    REDACTED_THINKING_PREFIX,
    AnthropicStreamAdapter,
)
from toolprep.runtime.providers.base import ModelRequest, ToolDeclaration
from toolprep.runtime.providers.history import MISSING_RESULT, HistoryBytes, tool_result_text
from toolprep.runtime.providers.request_body import ToolsJson, stream_body
from toolprep.runtime.providers.sse import DEFAULT_MAX_EVENT_BYTES

if TYPE_CHECKING:
    import anthropic

    from toolprep.runtime.providers.direct_post import DirectPost

__all__ = ["MESSAGES_PATH", "AnthropicProvider", "build_messages_params"]

MESSAGES_PATH = "/v1/messages"
"""Where ``client.messages.create`` posts, relative to the client's base URL."""


def _blocks(content: Content) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for part in content.parts:
        if isinstance(part, TextPart):
            if part.text:
                blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ThoughtPart):
            if content.role != "model" or not part.signature:
                continue
            if part.signature.startswith(REDACTED_THINKING_PREFIX):
                data = part.signature[len(REDACTED_THINKING_PREFIX) :]
                blocks.append({"type": "redacted_thinking", "data": data})
            else:
                blocks.append(
                    {"type": "thinking", "thinking": part.text, "signature": part.signature}
                )
        elif isinstance(part, FunctionCallPart):
            call = part.function_call
            blocks.append(
                {"type": "tool_use", "id": call.id, "name": call.name, "input": call.args}
            )
        elif isinstance(part, FunctionResponsePart):
            result = part.function_response
            results.append(
                {
                    "type": "tool_result",
                    "tool_use_id": result.id,
                    "content": tool_result_text(result),
                    "is_error": result.is_error,
                }
            )
    return results + blocks


def _messages(history: Sequence[Content]) -> tuple[list[dict[str, Any]], bool]:
    """The Messages API ``messages`` for ``history``; closed when the last is a user message
    of the history's own (the calls before it answered for good, and nothing after it
    can merge into it as long as an assistant message comes next)."""
    messages: list[dict[str, Any]] = []
    for content in history:
        blocks = _blocks(content)
        if not blocks:
            continue
        role = "assistant" if content.role == "model" else "user"
        if messages and messages[-1]["role"] == role:
            previous: list[dict[str, Any]] = messages[-1]["content"]
            if role == "user":
                # tool_result blocks must lead the user message
                merged = [b for b in previous + blocks if b["type"] == "tool_result"]
                merged += [b for b in previous + blocks if b["type"] != "tool_result"]
                messages[-1]["content"] = merged
            else:
                previous.extend(blocks)
            continue
        messages.append({"role": role, "content": blocks})
    # Closed only on a user message of the history's own: one that answers calls left
    # open (added below) would have to give way to the results a later content brings.
    closed = bool(messages) and messages[-1]["role"] == "user"
    return _answer_orphan_calls(messages), closed


def _starts_with_assistant(messages: list[dict[str, Any]]) -> bool:
    """Whether converted new contents may follow a closed history (roles alternate)."""
    return bool(messages[0]["role"] == "assistant")


def _answer_orphan_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        out.append(message)
        if message["role"] != "assistant":
            continue
        call_ids = [b["id"] for b in message["content"] if b["type"] == "tool_use"]
        if not call_ids:
            continue
        following = messages[i + 1] if i + 1 < len(messages) else None
        if following is not None and following["role"] != "user":
            following = None
        answered = set()
        if following is not None:
            answered = {
                b["tool_use_id"] for b in following["content"] if b["type"] == "tool_result"
            }
        missing = [
            {"type": "tool_result", "tool_use_id": cid, "content": MISSING_RESULT, "is_error": True}
            for cid in call_ids
            if cid not in answered
        ]
        if not missing:
            continue
        if following is not None:
            following["content"] = missing + following["content"]
        else:
            out.append({"role": "user", "content": missing})
    return out


def build_messages_params(
    request: ModelRequest, *, eager_input_streaming: bool = True
) -> dict[str, Any]:
    """Keyword arguments for ``client.messages.create`` (without ``stream``).

    ``eager_input_streaming`` marks every tool for fine-grained input streaming;
    off, the field is left out entirely (not sent as ``false``), so the body is
    what a server that knows nothing of it accepts.
    """
    params: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": _messages(request.history)[0],
    }
    if request.system:
        params["system"] = request.system
    if request.tools:
        params["tools"] = _tools(request.tools, eager_input_streaming=eager_input_streaming)
    return params


def _tools(
    declarations: tuple[ToolDeclaration, ...], *, eager_input_streaming: bool
) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = [
        {"name": t.name, "description": t.description, "input_schema": t.parameters}
        for t in declarations
    ]
    if eager_input_streaming:
        for tool in tools:
            tool["eager_input_streaming"] = True
    return tools


class AnthropicProvider:
    """``Provider`` over ``anthropic.AsyncAnthropic``; one adapter per stream.

    ``eager_input_streaming`` (default on) asks for tool input as it is
    generated instead of in one piece at the end. Turn it off for an
    Anthropic-compatible server that rejects the unknown tool field; tool
    input then arrives however that server buffers it.

    The request is posted by ``DirectPost`` with the client's URL and headers;
    its body is assembled from the history encoded once per turn
    (``HistoryBytes``) and the tools encoded once per tool set.
    """

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        *,
        name: str = "anthropic",
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        eager_input_streaming: bool = True,
        http_client: httpx2.AsyncClient | None = None,
    ) -> None:
        # Here, not at the top: aiohttp is imported with them, which the replay provider (which
        # imports this module for the request shape) must not pay for.
        from toolprep.runtime.providers.direct_post import DirectPost
        from toolprep.runtime.providers.sdk_compat import (
            anthropic_connection_error,
            anthropic_exception_map,
            status_error_factory,
        )

        self.client = client
        self.name = name
        self.max_event_bytes = max_event_bytes
        self.eager_input_streaming = eager_input_streaming
        self._post = DirectPost(
            client,
            MESSAGES_PATH,
            connection_error=anthropic_connection_error(client),
            status_error=status_error_factory(client),
            exception_map=anthropic_exception_map(),
            # ``create()`` sends the timeout it was given, and it is given none
            extra_headers={"x-stainless-timeout": "NOT_GIVEN"},
            http_client=http_client,
        )
        self._history = HistoryBytes(_messages, _starts_with_assistant)
        self._tools = ToolsJson(
            functools.partial(_tools, eager_input_streaming=eager_input_streaming)
        )

    @property
    def direct_post(self) -> DirectPost:
        """What this provider sends its requests with (a benchmark measures the transport
        alone through it)."""
        return self._post

    async def aclose(self) -> None:
        await self._post.aclose()
        await self.client.close()

    def request_body(self, request: ModelRequest) -> bytes:
        """The streaming request's JSON: what ``build_messages_params`` gives, plus ``stream``."""
        head: dict[str, Any] = {"model": request.model, "max_tokens": request.max_tokens}
        if request.system:
            head["system"] = request.system
        messages = (self._history.items(request.history),)
        return stream_body(head, messages, self._tools.get(request.tools))

    def stream(self, request: ModelRequest) -> AsyncIterator[GenerateContentResponse]:
        return self._post.stream(
            lambda: self.request_body(request),
            AnthropicStreamAdapter(),
            max_event_bytes=self.max_event_bytes,
        )
