"""The embedded default provider: recorded SSE played through the real SDK path.

No key, no network: an in-process ``httpx2`` transport answers the SDK's
POST with bytes from a *replay script*, so the official client, our SSE
decoder and the provider adapter all run exactly as they do against the
real API. ``toolprep acp`` uses it when no API key is configured, and the
demo and end-to-end tests use it to get deterministic, paced streams.

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
              "headers": {"retry-after": "1"}  # optional extra response headers
            }
          ]
        }
      ]
    }

How requests consume it: every request belongs to a conversation (keyed by
its first user prompt, so concurrent sessions with different prompts do not
interfere). When a request carries a new user prompt, the next turn is
chosen: the first turn, going round from the one after the previous turn,
whose ``match`` occurs in the prompt, else the first such turn with a null
``match``. Every request then takes the turn's next response, so the
request after a tool result, and a retry after a failed attempt, each get
the following response. A prompt no turn matches, or a turn that has run
out of responses, gets a short text answer saying so, in the script's wire
format.

The default script (``runtime/replay/default.json``) plays three turns for
the demo: a ``read_file`` of ``README.md`` whose arguments stream slowly
enough to see the card in its preparing phase, then an answer; a
``write_file`` whose first attempt dies mid-arguments with an overload
error (the retry discards that card), then a clean attempt and an answer;
and a ``search`` that stalls mid-arguments so the user can cancel it.
"""

from __future__ import annotations

import asyncio
import importlib.resources
import threading
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal

import anthropic
import httpx2
import openai
import orjson

from toolprep.runtime.providers.anthropic_provider import AnthropicProvider
from toolprep.runtime.providers.openai_provider import OpenAIProvider

__all__ = [
    "ReplayProvider",
    "ReplayResponse",
    "ReplayScript",
    "ReplayScriptError",
    "ReplayTransport",
    "ReplayTurn",
    "default_script_path",
]

ReplayFormat = Literal["anthropic", "openai"]


class ReplayScriptError(ValueError):
    """A replay script that does not follow the documented format."""


@dataclass(frozen=True, slots=True)
class ReplayResponse:
    events: tuple[bytes, ...] = ()
    pace_s: float = 0.0
    stall_after_events: int | None = None
    status: int = 200
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ReplayTurn:
    match: str | None
    responses: tuple[ReplayResponse, ...]


def _split_events(raw: bytes) -> tuple[bytes, ...]:
    """Cut a transcript into events (each keeps its blank line) so pacing is per event."""
    events: list[bytes] = []
    current: list[bytes] = []
    for line in raw.splitlines(keepends=True):
        current.append(line)
        if not line.strip():
            if len(current) > 1:
                events.append(b"".join(current))
            current = []
    if current and b"".join(current).strip():
        events.append(b"".join(current))
    return tuple(events)


def _response(spec: Any, base: Traversable, where: str) -> ReplayResponse:
    if not isinstance(spec, dict):
        raise ReplayScriptError(f"{where}: a response must be an object")
    status = spec.get("status", 200)
    if not isinstance(status, int) or not 100 <= status < 600:
        raise ReplayScriptError(f"{where}: status must be an HTTP status code")
    raw: bytes
    if "sse_file" in spec:
        target = base
        for piece in str(spec["sse_file"]).split("/"):
            target = target.joinpath(piece)
        raw = target.read_bytes()
    elif "sse" in spec:
        raw = str(spec["sse"]).encode("utf-8")
    elif status == 200:
        raise ReplayScriptError(f"{where}: needs sse_file, sse or a non-200 status")
    else:
        raw = b""
    stall = spec.get("stall_after_events")
    if stall is not None and (not isinstance(stall, int) or stall < 0):
        raise ReplayScriptError(f"{where}: stall_after_events must be a non-negative integer")
    body = spec.get("body", b"")
    body_bytes = (
        body
        if isinstance(body, bytes)
        else (body.encode() if isinstance(body, str) else orjson.dumps(body))
    )
    headers = spec.get("headers") or {}
    if not isinstance(headers, dict):
        raise ReplayScriptError(f"{where}: headers must be an object")
    return ReplayResponse(
        events=_split_events(raw),
        pace_s=float(spec.get("pace_ms", 0)) / 1000.0,
        stall_after_events=stall,
        status=status,
        body=body_bytes,
        headers={str(k): str(v) for k, v in headers.items()},
    )


@dataclass(frozen=True, slots=True)
class ReplayScript:
    provider: ReplayFormat
    turns: tuple[ReplayTurn, ...]

    @classmethod
    def from_dict(cls, data: Any, base: Traversable | Path) -> ReplayScript:
        """Validate a parsed script; ``sse_file`` paths resolve against ``base``."""
        if not isinstance(data, dict):
            raise ReplayScriptError("replay script must be a JSON object")
        provider = data.get("provider")
        if provider not in ("anthropic", "openai"):
            raise ReplayScriptError("replay script: provider must be 'anthropic' or 'openai'")
        turns_raw = data.get("turns")
        if not isinstance(turns_raw, list):
            raise ReplayScriptError("replay script: turns must be a list")
        turns: list[ReplayTurn] = []
        for t, turn in enumerate(turns_raw):
            if not isinstance(turn, dict) or not isinstance(turn.get("responses"), list):
                raise ReplayScriptError(f"replay script turn {t}: needs a responses list")
            match = turn.get("match")
            if match is not None and not isinstance(match, str):
                raise ReplayScriptError(f"replay script turn {t}: match must be a string or null")
            responses = tuple(
                _response(r, base, f"replay script turn {t} response {n}")
                for n, r in enumerate(turn["responses"])
            )
            turns.append(ReplayTurn(match or None, responses))
        return cls(provider, tuple(turns))

    @classmethod
    def load(cls, path: str | Path | None = None) -> ReplayScript:
        """Read a script file, or the packaged default script when ``path`` is None."""
        if path is None:
            base: Traversable = importlib.resources.files("toolprep.runtime").joinpath("replay")
            return cls.from_dict(orjson.loads(base.joinpath("default.json").read_bytes()), base)
        file = Path(path)
        try:
            data = orjson.loads(file.read_bytes())
        except orjson.JSONDecodeError as exc:
            raise ReplayScriptError(f"replay script {file}: not valid JSON ({exc})") from None
        return cls.from_dict(data, file.resolve().parent)


def default_script_path() -> Traversable:
    return importlib.resources.files("toolprep.runtime").joinpath("replay").joinpath("default.json")


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


@dataclass(slots=True)
class _Conversation:
    prompts_seen: int = 0
    turn: int | None = None
    next_turn: int = 0
    position: int = 0


class _Cursor:
    """Which response each request gets; thread-safe so one script can serve any loop."""

    def __init__(self, script: ReplayScript) -> None:
        self.script = script
        self._lock = threading.Lock()
        self._conversations: dict[str, _Conversation] = {}
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

    def next_response(self, body: Any) -> ReplayResponse | None:
        prompts = _prompts(body)
        key = prompts[0] if prompts else ""
        with self._lock:
            conversation = self._conversations.setdefault(key, _Conversation())
            if len(prompts) > conversation.prompts_seen or conversation.prompts_seen == 0:
                conversation.prompts_seen = len(prompts)
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
        return self.script.turns[turn].responses[position]

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
        response = self._cursor.next_response(body)
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


class ReplayProvider:
    """Builds a real provider whose HTTP client talks to a ``ReplayTransport``."""

    @staticmethod
    def from_script(
        path: str | Path | None = None, *, pace_scale: float = 1.0, max_retries: int = 0
    ) -> AnthropicProvider | OpenAIProvider:
        """The provider for a script file, or for the packaged default script.

        ``max_retries`` defaults to 0 so each scripted response is one attempt
        the supervisor sees; raise it to let the SDK retry scripted 429/5xx itself.
        """
        transport = ReplayTransport(ReplayScript.load(path), pace_scale=pace_scale)
        return ReplayProvider.from_transport(transport, max_retries=max_retries)

    @staticmethod
    def from_transport(
        transport: ReplayTransport, *, max_retries: int = 0
    ) -> AnthropicProvider | OpenAIProvider:
        http_client = httpx2.AsyncClient(transport=transport)
        if transport.script.provider == "anthropic":
            return AnthropicProvider(
                anthropic.AsyncAnthropic(
                    api_key="replay",
                    base_url="http://replay.invalid",
                    max_retries=max_retries,
                    http_client=http_client,
                ),
                name="replay",
            )
        return OpenAIProvider(
            openai.AsyncOpenAI(
                api_key="replay",
                base_url="http://replay.invalid/v1",
                max_retries=max_retries,
                http_client=http_client,
            ),
            name="replay",
        )
