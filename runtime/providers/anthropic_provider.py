"""Anthropic Messages provider: official SDK for transport, our adapter for the stream.

The request goes out through the SDK's public ``post`` with a body we
serialised once (see ``request_body``); the SDK still supplies auth,
headers, base URL, its retries and typed status errors.

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

from collections.abc import AsyncIterator
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
from toolprep.runtime.providers.base import ModelRequest, StreamError
from toolprep.runtime.providers.history import MISSING_RESULT, tool_result_text
from toolprep.runtime.providers.request_body import encode_request_body
from toolprep.runtime.providers.sdk_post import StreamingPost
from toolprep.runtime.providers.sse import DEFAULT_MAX_EVENT_BYTES
from toolprep.runtime.providers.streaming import pump_sse, sdk_status_error, transport_error

if TYPE_CHECKING:
    import anthropic

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


def _messages(history: tuple[Content, ...]) -> list[dict[str, Any]]:
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
    return _answer_orphan_calls(messages)


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
        "messages": _messages(request.history),
    }
    if request.system:
        params["system"] = request.system
    if request.tools:
        tools: list[dict[str, Any]] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in request.tools
        ]
        if eager_input_streaming:
            for tool in tools:
                tool["eager_input_streaming"] = True
        params["tools"] = tools
    return params


class AnthropicProvider:
    """``Provider`` over ``anthropic.AsyncAnthropic``; one adapter per stream.

    ``eager_input_streaming`` (default on) asks for tool input as it is
    generated instead of in one piece at the end. Turn it off for an
    Anthropic-compatible server that rejects the unknown tool field; tool
    input then arrives however that server buffers it.
    """

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        *,
        name: str = "anthropic",
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        eager_input_streaming: bool = True,
    ) -> None:
        # Here, not at the top: whoever holds a client has imported the SDK already, and
        # the modules importing this one (the replay provider's) must not pay for it.
        import anthropic

        self.client = client
        self.name = name
        self.max_event_bytes = max_event_bytes
        self.eager_input_streaming = eager_input_streaming
        self._post = StreamingPost(client, MESSAGES_PATH, {"timeout": anthropic.NOT_GIVEN})
        self._status_error = anthropic.APIStatusError
        self._transport_errors = (
            anthropic.APIConnectionError,
            httpx2.TransportError,
            httpx2.DecodingError,
        )

    async def aclose(self) -> None:
        await self.client.close()

    async def stream(self, request: ModelRequest) -> AsyncIterator[GenerateContentResponse]:
        params = build_messages_params(request, eager_input_streaming=self.eager_input_streaming)
        body = encode_request_body({**params, "stream": True})
        adapter = AnthropicStreamAdapter()
        try:
            response = await self._post.send(body)
            try:
                async for chunk in pump_sse(
                    response, adapter, max_event_bytes=self.max_event_bytes
                ):
                    yield chunk
            finally:
                await response.aclose()
        except StreamError:
            raise
        except self._status_error as exc:
            raise sdk_status_error(exc) from exc
        except self._transport_errors as exc:
            raise transport_error(exc, self.client.base_url) from exc
