"""OpenAI Chat Completions provider (and any OpenAI-compatible server).

``build_chat_params`` turns provider-neutral history into chat messages:
the system prompt first; a user turn's tool results become ``role: tool``
messages (``tool_call_id``) ahead of its text; a model turn becomes one
assistant message with ``content`` and ``tool_calls`` (arguments as a JSON
string). Thoughts are not sent back (Chat Completions has no slot for them
and some servers reject ``reasoning_content`` in requests), except a
Gemini thought signature, which goes back on the call it belongs to as
``extra_content.google.thought_signature``. A call left without a result
gets an error result, since every ``tool_calls`` id must be answered.

``max_tokens_field`` exists because OpenAI's own reasoning models reject
``max_tokens`` while many compatible servers only know it. By default the
newer ``max_completion_tokens`` is used for api.openai.com and
``max_tokens`` for every other base URL.

The request goes out through the SDK's public ``post`` with a body we
serialised once (see ``request_body``); the SDK still supplies auth,
headers, base URL, its retries and typed status errors.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Literal

import httpx2
import orjson

from toolprep.messages.content import (
    Content,
    FunctionCallPart,
    FunctionResponsePart,
    GenerateContentResponse,
    TextPart,
    ThoughtPart,
)
from toolprep.runtime.providers.base import ModelRequest, StreamError
from toolprep.runtime.providers.history import MISSING_RESULT, tool_result_text
from toolprep.runtime.providers.openai_adapter import OpenAIStreamAdapter
from toolprep.runtime.providers.request_body import encode_request_body
from toolprep.runtime.providers.sdk_post import StreamingPost
from toolprep.runtime.providers.sse import DEFAULT_MAX_EVENT_BYTES
from toolprep.runtime.providers.streaming import pump_sse, sdk_status_error, transport_error

if TYPE_CHECKING:
    import openai

__all__ = ["CHAT_COMPLETIONS_PATH", "MaxTokensField", "OpenAIProvider", "build_chat_params"]

CHAT_COMPLETIONS_PATH = "/chat/completions"
"""Where ``client.chat.completions.create`` posts, relative to the client's base URL."""

MaxTokensField = Literal["max_tokens", "max_completion_tokens"]


def _model_message(content: Content) -> dict[str, Any] | None:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    # Gemini signs only some calls (the first of a parallel group); signatures precede
    # the calls in history, so they are handed out to the calls in order.
    signatures: list[str] = []
    for part in content.parts:
        if isinstance(part, TextPart):
            texts.append(part.text)
        elif isinstance(part, ThoughtPart):
            if part.signature:
                signatures.append(part.signature)
        elif isinstance(part, FunctionCallPart):
            fc = part.function_call
            call: dict[str, Any] = {
                "id": fc.id,
                "type": "function",
                "function": {"name": fc.name, "arguments": orjson.dumps(fc.args).decode()},
            }
            if signatures:
                call["extra_content"] = {"google": {"thought_signature": signatures.pop(0)}}
            calls.append(call)
    text = "".join(texts)
    if not text and not calls:
        return None
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    return message


def _messages(request: ModelRequest) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    unanswered: list[str] = []

    def answer_missing() -> None:
        for call_id in unanswered:
            messages.append({"role": "tool", "tool_call_id": call_id, "content": MISSING_RESULT})
        unanswered.clear()

    for content in request.history:
        if content.role == "model":
            answer_missing()
            message = _model_message(content)
            if message is not None:
                messages.append(message)
                unanswered.extend(c["id"] for c in message.get("tool_calls", ()))
            continue
        texts: list[str] = []
        for part in content.parts:
            if isinstance(part, FunctionResponsePart):
                result = part.function_response
                if result.id in unanswered:
                    unanswered.remove(result.id)
                messages.append(
                    {"role": "tool", "tool_call_id": result.id, "content": tool_result_text(result)}
                )
            elif isinstance(part, TextPart) and part.text:
                texts.append(part.text)
        if texts:
            answer_missing()
            messages.append({"role": "user", "content": "".join(texts)})
    answer_missing()
    return messages


def default_max_tokens_field(base_url: str | httpx2.URL) -> MaxTokensField:
    host = httpx2.URL(str(base_url)).host
    return "max_completion_tokens" if host == "api.openai.com" else "max_tokens"


def build_chat_params(
    request: ModelRequest, *, max_tokens_field: MaxTokensField = "max_tokens"
) -> dict[str, Any]:
    """Keyword arguments for ``client.chat.completions.create`` (without ``stream``)."""
    params: dict[str, Any] = {
        "model": request.model,
        "messages": _messages(request),
        max_tokens_field: request.max_tokens,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        params["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in request.tools
        ]
    return params


class OpenAIProvider:
    """``Provider`` over ``openai.AsyncOpenAI``; one adapter per stream."""

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        *,
        name: str = "openai",
        max_tokens_field: MaxTokensField | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        # Here, not at the top: whoever holds a client has imported the SDK already, and
        # the modules importing this one (the replay provider's) must not pay for it.
        import openai

        self.client = client
        self.name = name
        self.max_event_bytes = max_event_bytes
        self.max_tokens_field: MaxTokensField = max_tokens_field or default_max_tokens_field(
            client.base_url
        )
        # what ``create()`` asks for: the API key as a bearer token, no admin key
        self._post = StreamingPost(
            client,
            CHAT_COMPLETIONS_PATH,
            {"timeout": openai.NOT_GIVEN, "security": {"bearer_auth": True}},
        )
        self._status_error = openai.APIStatusError
        self._transport_errors = (
            openai.APIConnectionError,
            httpx2.TransportError,
            httpx2.DecodingError,
        )

    async def aclose(self) -> None:
        await self.client.close()

    async def stream(self, request: ModelRequest) -> AsyncIterator[GenerateContentResponse]:
        params = build_chat_params(request, max_tokens_field=self.max_tokens_field)
        body = encode_request_body({**params, "stream": True})
        adapter = OpenAIStreamAdapter(t.name for t in request.tools)
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
