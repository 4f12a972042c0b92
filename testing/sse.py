"""SSE transcripts in the Anthropic and OpenAI streaming wire formats.

One set of builders for everything that plays a provider on loopback: the tests state a
turn in one line (``anthropic_sse(text="hi")``) instead of pasting transcripts, and the
benchmarks build their realistic turns with the same functions, so both speak exactly the
same wire. ``FakeProviderServer`` (``toolprep.testing.provider``) serves what they build.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "ToolCallSpec",
    "anthropic_sse",
    "openai_sse",
    "split_sse_events",
    "unterminated_line",
]


def split_sse_events(text: str | bytes) -> list[bytes]:
    """Split an SSE transcript into events, each with its own terminating blank line.

    Bytes are kept exactly (CRLF stays CRLF); a trailing event that lacks the
    final blank line stays unterminated, so EOF handling is exercised as well.
    """
    raw = text.encode("utf-8") if isinstance(text, str) else text
    events: list[bytes] = []
    current: list[bytes] = []
    for line in raw.splitlines(keepends=True):
        current.append(line)
        if line in (b"\n", b"\r\n", b"\r"):
            if len(current) > 1:
                events.append(b"".join(current))
            current = []
    if current and b"".join(current).strip():
        events.append(b"".join(current))
    return events


def _sse_event(name: str | None, payload: Mapping[str, Any] | str) -> str:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {data}\n\n"


def _fragments(text: str, size: int) -> list[str]:
    if size <= 0 or not text:
        return [text]
    return [text[i : i + size] for i in range(0, len(text), size)]


ToolCallSpec = tuple[str, str, Mapping[str, Any]]
"""A tool call to stream: its id, the tool's name and its arguments."""


def anthropic_sse(
    text: str | None = None,
    tool_calls: Iterable[ToolCallSpec] = (),
    *,
    thinking: str | None = None,
    signature: str = "c2lnbmF0dXJl",
    fragment_size: int = 8,
    args_fragment_size: int | None = None,
    stop_reason: str | None = None,
    message_id: str = "msg_fake_1",
    model: str = "claude-fake",
    input_tokens: int = 10,
    output_tokens: int = 20,
    terminal: bool = True,
) -> str:
    """An Anthropic Messages stream: optional thinking, text, then tool_use blocks.

    Text is split into ``fragment_size`` pieces, tool arguments into
    ``args_fragment_size`` pieces (default: the same). The
    default stop reason is ``tool_use`` when there are tool calls, else
    ``end_turn``. ``terminal=False`` leaves out ``message_delta``/``message_stop``.
    """
    calls = list(tool_calls)
    out = [
        _sse_event(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": input_tokens, "output_tokens": 1},
                },
            },
        )
    ]
    index = 0
    if thinking is not None:
        out.append(
            _sse_event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                },
            )
        )
        for piece in _fragments(thinking, fragment_size):
            out.append(
                _sse_event(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "thinking_delta", "thinking": piece},
                    },
                )
            )
        out.append(
            _sse_event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "signature_delta", "signature": signature},
                },
            )
        )
        out.append(_sse_event("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    if text is not None:
        out.append(
            _sse_event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                },
            )
        )
        for piece in _fragments(text, fragment_size):
            out.append(
                _sse_event(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "text_delta", "text": piece},
                    },
                )
            )
        out.append(_sse_event("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    for call_id, name, args in calls:
        out.append(
            _sse_event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}},
                },
            )
        )
        out.append(
            _sse_event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": ""},
                },
            )
        )
        for piece in _fragments(json.dumps(dict(args)), args_fragment_size or fragment_size):
            out.append(
                _sse_event(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    },
                )
            )
        out.append(_sse_event("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    if terminal:
        reason = stop_reason or ("tool_use" if calls else "end_turn")
        out.append(
            _sse_event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": reason, "stop_sequence": None},
                    "usage": {"output_tokens": output_tokens},
                },
            )
        )
        out.append(_sse_event("message_stop", {"type": "message_stop"}))
    return "".join(out)


def openai_sse(
    text: str | None = None,
    tool_calls: Iterable[ToolCallSpec] = (),
    *,
    reasoning: str | None = None,
    fragment_size: int = 8,
    args_fragment_size: int | None = None,
    finish_reason: str | None = None,
    completion_id: str = "chatcmpl-fake-1",
    model: str = "gpt-fake",
    prompt_tokens: int = 10,
    completion_tokens: int = 20,
    usage_chunk: bool = True,
    done: bool = True,
) -> str:
    """An OpenAI Chat Completions stream: optional reasoning, text, then tool calls.

    Tool calls follow the official shape: the first fragment carries index,
    id, name and ``""`` arguments; later ones only argument pieces, of
    ``args_fragment_size`` characters (default: ``fragment_size``). The
    default finish reason is ``tool_calls`` when there are calls, else
    ``stop``. ``usage_chunk`` adds the trailing choices-less usage chunk that
    ``stream_options.include_usage`` produces; ``done=False`` omits ``[DONE]``.
    """
    calls = list(tool_calls)

    def chunk(delta: Mapping[str, Any], finish: str | None = None) -> str:
        return _sse_event(
            None,
            {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": 1700000000,
                "model": model,
                "choices": [{"index": 0, "delta": dict(delta), "finish_reason": finish}],
            },
        )

    out = [chunk({"role": "assistant", "content": ""})]
    if reasoning is not None:
        out.extend(
            chunk({"reasoning_content": piece}) for piece in _fragments(reasoning, fragment_size)
        )
    if text is not None:
        out.extend(chunk({"content": piece}) for piece in _fragments(text, fragment_size))
    for n, (call_id, name, args) in enumerate(calls):
        out.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": n,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": ""},
                        }
                    ]
                }
            )
        )
        for piece in _fragments(json.dumps(dict(args)), args_fragment_size or fragment_size):
            out.append(chunk({"tool_calls": [{"index": n, "function": {"arguments": piece}}]}))
    if finish_reason != "":
        out.append(chunk({}, finish_reason or ("tool_calls" if calls else "stop")))
    if usage_chunk:
        out.append(
            _sse_event(
                None,
                {
                    "id": completion_id,
                    "object": "chat.completion.chunk",
                    "created": 1700000000,
                    "model": model,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": completion_tokens,
                        "total_tokens": prompt_tokens + completion_tokens,
                    },
                },
            )
        )
    if done:
        out.append(_sse_event(None, "[DONE]"))
    return "".join(out)


def unterminated_line(
    size: int, *, head: bytes = b"data: ", fill: bytes = b"x", piece: int = 64 * 1024
) -> list[bytes]:
    """``head`` then filler to ``size`` bytes, never ending the line, as ``piece``-byte events.

    Served as ``ScriptedResponse(events=...)`` each piece is one HTTP chunk,
    so the client reads one huge SSE line incrementally, as from a server
    that never finishes an event.
    """
    body = head + fill * (size - len(head))
    return [body[i : i + piece] for i in range(0, len(body), piece)]
