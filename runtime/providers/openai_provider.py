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

The request goes out over aiohttp (``DirectPost``) with the URL, headers
and timeouts of the SDK client, and a failed answer raises the SDK's own
exception class and message (mapped on to ``StreamError``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
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
from toolprep.runtime.providers.base import ModelRequest, ToolDeclaration
from toolprep.runtime.providers.history import (
    MISSING_RESULT,
    HistoryBytes,
    json_items,
    tool_result_text,
)
from toolprep.runtime.providers.openai_adapter import OpenAIStreamAdapter
from toolprep.runtime.providers.request_body import ToolsJson, stream_body
from toolprep.runtime.providers.sse import DEFAULT_MAX_EVENT_BYTES

if TYPE_CHECKING:
    import openai

    from toolprep.runtime.providers.direct_post import DirectPost

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


def _system_message(system: str) -> dict[str, Any]:
    return {"role": "system", "content": system}


def _messages(history: Sequence[Content]) -> tuple[list[dict[str, Any]], bool]:
    """Chat messages for ``history`` (without the system prompt); closed when no call
    was left waiting for its result at the end, so later contents convert on their own."""
    messages: list[dict[str, Any]] = []
    unanswered: list[str] = []

    def answer_missing() -> None:
        for call_id in unanswered:
            messages.append({"role": "tool", "tool_call_id": call_id, "content": MISSING_RESULT})
        unanswered.clear()

    for content in history:
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
    closed = not unanswered
    answer_missing()
    return messages, closed


def _always(_: list[dict[str, Any]]) -> bool:
    return True


def default_max_tokens_field(base_url: str | httpx2.URL) -> MaxTokensField:
    host = httpx2.URL(str(base_url)).host
    return "max_completion_tokens" if host == "api.openai.com" else "max_tokens"


def build_chat_params(
    request: ModelRequest, *, max_tokens_field: MaxTokensField = "max_tokens"
) -> dict[str, Any]:
    """Keyword arguments for ``client.chat.completions.create`` (without ``stream``)."""
    messages = _messages(request.history)[0]
    if request.system:
        messages.insert(0, _system_message(request.system))
    params: dict[str, Any] = {
        "model": request.model,
        "messages": messages,
        max_tokens_field: request.max_tokens,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        params["tools"] = _tools(request.tools)
    return params


def _tools(declarations: tuple[ToolDeclaration, ...]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in declarations
    ]


class OpenAIProvider:
    """``Provider`` over ``openai.AsyncOpenAI``; one adapter per stream.

    Posted by ``DirectPost`` with the client's URL and headers; the body is
    assembled from the history encoded once per turn and the tools encoded
    once per tool set, as ``AnthropicProvider`` does.
    """

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        *,
        name: str = "openai",
        max_tokens_field: MaxTokensField | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        http_client: httpx2.AsyncClient | None = None,
    ) -> None:
        # Here, not at the top: whoever holds a client has imported the SDK already, and
        # the modules importing this one (the replay provider's) must not pay for it.
        import openai

        from toolprep.runtime.providers.direct_post import DirectPost
        from toolprep.runtime.providers.sdk_compat import (
            openai_exception_map,
            status_error_factory,
        )

        self.client = client
        self.name = name
        self.max_event_bytes = max_event_bytes
        self.max_tokens_field: MaxTokensField = max_tokens_field or default_max_tokens_field(
            client.base_url
        )

        def connection_error(request: httpx2.Request, cause: httpx2.TransportError) -> Exception:
            if isinstance(cause, httpx2.TimeoutException):
                return openai.APITimeoutError(request=request)
            return openai.APIConnectionError(request=request)

        self._post = DirectPost(
            client,
            CHAT_COMPLETIONS_PATH,
            connection_error=connection_error,
            status_error=status_error_factory(client),
            exception_map=openai_exception_map(),
            http_client=http_client,
        )
        self._history = HistoryBytes(_messages, _always)
        self._tools = ToolsJson(_tools)

    @property
    def direct_post(self) -> DirectPost:
        """What this provider sends its requests with (a benchmark measures the transport
        alone through it)."""
        return self._post

    async def aclose(self) -> None:
        await self._post.aclose()
        await self.client.close()

    def request_body(self, request: ModelRequest) -> bytes:
        """The streaming request's JSON: what ``build_chat_params`` gives, plus ``stream``."""
        head: dict[str, Any] = {
            "model": request.model,
            self.max_tokens_field: request.max_tokens,
            "stream_options": {"include_usage": True},
        }
        history = self._history.items(request.history)
        messages: tuple[bytes | bytearray, ...] = (history,)
        if request.system:
            system = json_items([_system_message(request.system)])
            messages = (system, b",", history) if history else (system,)
        return stream_body(head, messages, self._tools.get(request.tools))

    def stream(self, request: ModelRequest) -> AsyncIterator[GenerateContentResponse]:
        return self._post.stream(
            lambda: self.request_body(request),
            OpenAIStreamAdapter(t.name for t in request.tools),
            max_event_bytes=self.max_event_bytes,
        )
