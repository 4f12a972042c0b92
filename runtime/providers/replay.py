"""The embedded default provider: recorded SSE played through the real stream path.

No key, no network: an in-process ``httpx2`` transport answers each request
with bytes from a *replay script*, and the request body, SSE decoder, stream
adapter and status mapping are the very ones the Anthropic and OpenAI
providers use. Only the SDK's share (auth, headers, its retries) is left
out: neither SDK is imported, so an agent on the replay provider starts in
a fraction of the time. ``toolprep acp`` uses it when no API key is
configured, and the demo and end-to-end tests use it to get deterministic,
paced streams.

Replay script format (JSON)::

    {
      "provider": "anthropic" | "openai",      # wire format of the recorded streams
      "turns": [
        {
          "match": "README" | null,            # picked for a prompt containing this text
                                               # (case-insensitive); null matches any prompt
          "responses": [                       # one per model request in this turn, in order
            {
              "sse_file": "turn1.sse",         # path relative to the script, or
              "sse": "event: ...\\n\\n",         # the transcript inline
              "pace_ms": 30,                   # delay before each event after the first
              "stall_after_events": 12,        # optional: send 12 events, then hang until
                                               # the request is cancelled
              "status": 529,                   # optional: answer with this HTTP status and
              "body": {"type": "error", ...},  # this JSON body instead of a stream
              "headers": {"retry-after": "1"}, # optional extra response headers
              "on_tool_error": {...}           # optional: the response (same fields) given
                                               # instead when a tool result failed
            }
          ]
        }
      ]
    }

How requests consume it: every request belongs to a conversation, its
session (``ModelRequest.conversation``), so any number of sessions, at once
or one after another, each play the script from its start; a request from no
session is keyed by its first user prompt. A request whose last message is a
user prompt it has not begun a turn with begins the next turn: the first
turn, going round from the one after the conversation's previous turn, whose
``match`` occurs in the prompt, else the first such turn with a null
``match``. Every other request takes the turn's next response, so the
request after a tool result, and a retry after a failed attempt (the same
request again), each get the following response. A prompt no turn matches,
or a turn that has run out of responses, gets a short text answer saying
so, in the script's wire format.

A response may say what to answer instead when a tool result the request
carries back failed (the session's mode or the user refused the call, or the
tool failed), so a recorded answer never claims what did not happen::

    {"sse_file": "answer.sse", "on_tool_error": {"sse_file": "not-done.sse"}}

The default script (``runtime/replay/default.json``) plays three turns for
the demo: a ``read_file`` of ``README.md`` whose arguments stream slowly
enough to see the card in its preparing phase, then an answer; a
``write_file`` whose first attempt dies mid-arguments with an overload
error (the retry discards that card), then a clean attempt and an answer;
and a ``search`` that stalls mid-arguments so the user can cancel it.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import httpx2
import orjson

from toolprep.messages.content import FunctionResponsePart, GenerateContentResponse
from toolprep.runtime.providers.anthropic_adapter import AnthropicStreamAdapter
from toolprep.runtime.providers.anthropic_provider import MESSAGES_PATH, build_messages_params
from toolprep.runtime.providers.base import ModelRequest
from toolprep.runtime.providers.openai_adapter import OpenAIStreamAdapter
from toolprep.runtime.providers.openai_provider import CHAT_COMPLETIONS_PATH, build_chat_params
from toolprep.runtime.providers.replay_script import (
    ReplayFormat,
    ReplayResponse,
    ReplayScript,
    ReplayScriptError,
    ReplayTurn,
    default_script_path,
)
from toolprep.runtime.providers.request_body import encode_request_body
from toolprep.runtime.providers.sse import DEFAULT_MAX_EVENT_BYTES
from toolprep.runtime.providers.streaming import (
    Reply,
    StreamAdapter,
    body_status_error,
    stream_chunks,
)

__all__ = [
    "ReplayProvider",
    "ReplayResponse",
    "ReplayScript",
    "ReplayScriptError",
    "ReplayTransport",
    "ReplayTurn",
    "RequestFacts",
    "default_script_path",
]

# --- choosing a response for a request ---------------------------------------------


def _prompts(body: Any) -> list[str]:
    """The user prompt texts in a request body (tool results are not prompts)."""
    messages = body.get("messages") if isinstance(body, dict) else None
    prompts: list[str] = []
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            if content:
                prompts.append(content)
        elif isinstance(content, list):
            text = "".join(
                b.get("text", "")
                for b in content
                if isinstance(b, dict) and b.get("type") == "text"
            )
            if text:
                prompts.append(text)
    return prompts


def _ends_with_prompt(body: Any) -> bool:
    """Whether the request's last message is the user's prompt (not only tool results):
    the request that begins a turn, or a retry of it."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return False
    return bool(_prompts({"messages": messages[-1:]}))


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """What the provider knows of a request that not every wire format says in its body.

    ``conversation`` is the session the request belongs to; ``tool_failed`` is true when a
    tool result the request carries back failed (refused by the session's mode or the user,
    or an error), which the OpenAI wire does not mark.
    """

    conversation: str | None = None
    tool_failed: bool = False


FACTS_EXTENSION = "toolprep.replay"
"""The request extension ``ReplayProvider`` hands its ``RequestFacts`` to the transport in."""

MAX_CONVERSATIONS = 4096
"""Conversations the cursor remembers, the least recently served forgotten first: a
long-running agent opens sessions without end. A forgotten one that goes on starts its
current turn again from that turn's first response."""


@dataclass(slots=True)
class _Conversation:
    started: bool = False
    turn: int | None = None
    next_turn: int = 0
    position: int = 0
    opened_by: bytes = b""  # digest of the request body that began the current turn


class _Cursor:
    """Which response each request gets; thread-safe so one script can serve any loop.

    Each conversation (session) goes through the script on its own: any number of sessions
    with the same prompt, at once or one after another, each get the whole turn.
    """

    def __init__(self, script: ReplayScript) -> None:
        self.script = script
        self._lock = threading.Lock()
        self._conversations: OrderedDict[str, _Conversation] = OrderedDict()
        self.served: list[tuple[int | None, int]] = []

    def _pick_turn(self, prompt: str, start: int) -> int | None:
        turns = self.script.turns
        order = [(start + i) % len(turns) for i in range(len(turns))] if turns else []
        lowered = prompt.lower()
        for i in order:
            match = turns[i].match
            if match is not None and match.lower() in lowered:
                return i
        for i in order:
            if turns[i].match is None:
                return i
        return None

    def _conversation(self, key: str) -> _Conversation:
        conversation = self._conversations.get(key)
        if conversation is None:
            conversation = self._conversations[key] = _Conversation()
            while len(self._conversations) > MAX_CONVERSATIONS:
                self._conversations.popitem(last=False)
        else:
            self._conversations.move_to_end(key)
        return conversation

    def next_response(
        self, body: Any, raw: bytes, facts: RequestFacts = RequestFacts()
    ) -> ReplayResponse | None:
        """The response for one request. A request whose last message is a prompt it has
        not begun a turn with yet begins the next turn; any other request (the one after
        the tool results, a retry of a failed attempt) takes the turn's next response."""
        prompts = _prompts(body)
        if facts.conversation is not None:
            key = "session " + facts.conversation
        else:  # a request from no session: its first prompt is all that tells it apart
            key = "prompt " + (prompts[0] if prompts else "")
        digest = hashlib.blake2b(raw, digest_size=16).digest()
        with self._lock:
            conversation = self._conversation(key)
            begins = _ends_with_prompt(body) and digest != conversation.opened_by
            if begins or not conversation.started:
                conversation.started = True
                conversation.opened_by = digest
                conversation.turn = self._pick_turn(
                    prompts[-1] if prompts else "", conversation.next_turn
                )
                conversation.position = 0
                if conversation.turn is not None:
                    conversation.next_turn = conversation.turn + 1
            turn, position = conversation.turn, conversation.position
            conversation.position += 1
            self.served.append((turn, position))
        if turn is None or position >= len(self.script.turns[turn].responses):
            return None
        response = self.script.turns[turn].responses[position]
        if facts.tool_failed and response.on_tool_error is not None:
            return response.on_tool_error
        return response

    def hint(self) -> str:
        matches = [t.match for t in self.script.turns if t.match]
        if not matches:
            return "This replay script has no further responses for this conversation."
        listed = ", ".join(repr(m) for m in matches)
        return (
            "This is toolprep's embedded replay provider; it has no recorded answer for that. "
            f"Try a prompt mentioning one of: {listed}."
        )


def _text_stream(provider: ReplayFormat, text: str) -> tuple[bytes, ...]:
    """A minimal, valid text-only stream in the given wire format."""

    def event(name: str | None, payload: Any) -> bytes:
        head = f"event: {name}\n".encode() if name else b""
        return head + b"data: " + orjson.dumps(payload) + b"\n\n"

    if provider == "anthropic":
        return (
            event(
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": "msg_replay_hint",
                        "type": "message",
                        "role": "assistant",
                        "model": "replay",
                        "content": [],
                        "stop_reason": None,
                        "usage": {"input_tokens": 0, "output_tokens": 0},
                    },
                },
            ),
            event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            ),
            event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": text},
                },
            ),
            event("content_block_stop", {"type": "content_block_stop", "index": 0}),
            event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn"},
                    "usage": {"output_tokens": 0},
                },
            ),
            event("message_stop", {"type": "message_stop"}),
        )
    base = {"id": "chatcmpl-replay-hint", "object": "chat.completion.chunk", "model": "replay"}
    return (
        event(
            None,
            {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": text},
                        "finish_reason": None,
                    }
                ],
            },
        ),
        event(None, {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        b"data: [DONE]\n\n",
    )


# --- the transport -------------------------------------------------------------------


class _ReplayStream(httpx2.AsyncByteStream):
    def __init__(self, response: ReplayResponse, pace_scale: float) -> None:
        self._response = response
        self._pace = response.pace_s * pace_scale

    async def __aiter__(self) -> AsyncIterator[bytes]:
        stall = self._response.stall_after_events
        for n, event in enumerate(self._response.events):
            if stall is not None and n >= stall:
                await asyncio.Event().wait()  # hang until the reading task is cancelled
            if n and self._pace > 0:
                await asyncio.sleep(self._pace)
            yield event
        if stall is not None:
            await asyncio.Event().wait()

    async def aclose(self) -> None:
        return None


class ReplayTransport(httpx2.AsyncBaseTransport):
    """Answers every request from a ``ReplayScript``; ``served`` logs ``(turn, response)``."""

    def __init__(self, script: ReplayScript, *, pace_scale: float = 1.0) -> None:
        self.script = script
        self.pace_scale = pace_scale
        self._cursor = _Cursor(script)

    @property
    def served(self) -> list[tuple[int | None, int]]:
        return list(self._cursor.served)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        raw = await request.aread()
        try:
            body = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            body = None
        facts = request.extensions.get(FACTS_EXTENSION)
        if not isinstance(facts, RequestFacts):
            facts = RequestFacts()
        response = self._cursor.next_response(body, raw, facts)
        if response is None:
            response = ReplayResponse(
                events=_text_stream(self.script.provider, self._cursor.hint())
            )
        if response.status != 200:
            headers = {"content-type": "application/json", **response.headers}
            return httpx2.Response(
                response.status, headers=headers, content=response.body, request=request
            )
        headers = {"content-type": "text/event-stream", **response.headers}
        return httpx2.Response(
            200, headers=headers, stream=_ReplayStream(response, self.pace_scale), request=request
        )


def _last_results_failed(request: ModelRequest) -> bool:
    """Whether a tool result among the request's last history entry failed."""
    last = request.history[-1] if request.history else None
    if last is None or last.role != "user":
        return False
    return any(
        isinstance(part, FunctionResponsePart) and part.function_response.is_error
        for part in last.parts
    )


_URLS: dict[ReplayFormat, str] = {
    "anthropic": "http://replay.invalid" + MESSAGES_PATH,
    "openai": "http://replay.invalid/v1" + CHAT_COMPLETIONS_PATH,
}


class ReplayProvider:
    """A ``Provider`` answered by a ``ReplayTransport``, in its script's wire format.

    Each request is built and each answer read exactly as the SDK-backed
    provider of that format does: ``build_messages_params`` or
    ``build_chat_params``, then ``stream_chunks`` through that format's adapter,
    and a non-2xx answer mapped by the same status rules.
    """

    def __init__(
        self, transport: ReplayTransport, *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    ) -> None:
        self.name = "replay"
        self.transport = transport
        self.wire: ReplayFormat = transport.script.provider
        self.max_event_bytes = max_event_bytes

    @classmethod
    def from_script(cls, path: str | Path | None = None, *, pace_scale: float = 1.0) -> Self:
        """The provider for a script file, or for the packaged default script."""
        return cls(ReplayTransport(ReplayScript.load(path), pace_scale=pace_scale))

    @classmethod
    def from_transport(cls, transport: ReplayTransport) -> Self:
        return cls(transport)

    async def aclose(self) -> None:
        return None  # no sockets: the transport lives in memory

    def _encode(self, request: ModelRequest) -> tuple[bytes, StreamAdapter]:
        if self.wire == "anthropic":
            params = build_messages_params(request)
            adapter: StreamAdapter = AnthropicStreamAdapter()
        else:
            params = build_chat_params(request)
            adapter = OpenAIStreamAdapter(t.name for t in request.tools)
        return encode_request_body({**params, "stream": True}), adapter

    def stream(self, request: ModelRequest) -> AsyncIterator[GenerateContentResponse]:
        body, adapter = self._encode(request)
        facts = RequestFacts(request.conversation, _last_results_failed(request))

        async def send() -> Reply:
            sent = httpx2.Request(
                "POST",
                _URLS[self.wire],
                content=body,
                headers={"content-type": "application/json"},
                extensions={FACTS_EXTENSION: facts},
            )
            response = await self.transport.handle_async_request(sent)
            if not 200 <= response.status_code < 300:
                try:
                    error_body = await response.aread()
                finally:
                    await response.aclose()
                raise body_status_error(response.status_code, error_body, response.headers)
            chunks = response.aiter_bytes()

            async def read() -> bytes:
                return await anext(chunks, b"")

            return Reply(response.headers.get("content-type"), read, response.aclose)

        return stream_chunks(send, adapter, max_event_bytes=self.max_event_bytes)
