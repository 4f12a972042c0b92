"""Compaction: what a session sends the model once its history nears the context window.

When the last request used ``at`` of the model's window (``--compact-at``), or
the provider refused a request as too large for it, the older part of the
history is summarised by the same model and replaced with that summary; the
most recent messages (about ``keep`` of the window) stay verbatim. This
module holds the pure parts: when to compact, where to cut, the summary
request and the message that replaces the older part.

The cut is always just before a model message. That never separates a tool
call from its result: a model message's calls are answered by the user
message right after it, which lands on the same side; and the summary (a user
message) is followed by a model message, so both wires see roles alternate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from toolprep.messages.content import (
    Content,
    FunctionCallPart,
    FunctionResponsePart,
    Part,
    TextPart,
    ThoughtPart,
)
from toolprep.messages.frames import agent_thought_chunk
from toolprep.messages.requests import StreamError
from toolprep.runtime.providers.history import tool_result_text

__all__ = [
    "DEFAULT_COMPACT_AT",
    "DEFAULT_KEEP",
    "SUMMARY_HEADER",
    "SUMMARY_INSTRUCTION",
    "CompactionPolicy",
    "Split",
    "check_compact_at",
    "compaction_failed_note",
    "compaction_note",
    "context_overflow",
    "oversized_prompt",
    "prompt_refused_note",
    "prompt_too_large_message",
    "render_transcript",
    "split_history",
    "summary_message",
    "summary_prompt",
]

DEFAULT_COMPACT_AT = 0.8
DEFAULT_KEEP = 0.25

BYTES_PER_TOKEN = 4
"""About how many bytes of UTF-8 text a token holds (English prose; code and other
scripts hold fewer): the size a refusal reports, as "about N tokens"."""

MOST_BYTES_PER_TOKEN = 8
"""More UTF-8 bytes than real text averages per token on these models' tokenizers:
a prompt bigger than this many bytes per token of the window cannot fit, so it is
refused before any request. Nearer the window, the provider's refusal decides."""

SUMMARY_INSTRUCTION = (
    "You summarise the earlier part of a conversation between a user and a coding agent, "
    "so that the agent can continue the work from the summary alone. Keep the user's goals "
    "and requests, decisions taken, files and code touched (with their paths), tool results "
    "that still matter, errors met and how they were resolved, and what remains to do. "
    "Write concise plain text; do not address the user and do not continue the conversation."
)
"""The system prompt of the summary request."""

SUMMARY_HEADER = (
    "Summary of the earlier conversation (older messages were compacted to stay within "
    "the model's context window):\n\n"
)
"""What the summary message starts with, so the model knows what it is reading."""


def check_compact_at(fraction: float) -> float:
    """``fraction`` if it is a valid ``--compact-at`` (0 turns compaction off), else ValueError."""
    if not 0 <= fraction <= 1:  # also rejects NaN
        raise ValueError(
            f"--compact-at must be a fraction of the context window between 0 and 1 "
            f"(0 turns compaction off), got {fraction}"
        )
    return fraction


@dataclass(frozen=True, slots=True)
class CompactionPolicy:
    """When to compact (``at`` of the window used; 0: never) and how much to keep verbatim."""

    at: float = DEFAULT_COMPACT_AT
    keep: float = DEFAULT_KEEP

    def due(self, used: int, window: int) -> bool:
        """Whether a request that used ``used`` of ``window`` tokens calls for compaction."""
        return self.at > 0 and used >= self.at * window

    def keep_tokens(self, window: int) -> int:
        return int(self.keep * window)


@dataclass(frozen=True, slots=True)
class Split:
    """``history[:at]`` is summarised, ``history[at:]`` is kept verbatim."""

    at: int


def _render(content: Content) -> str:
    lines: list[str] = []
    for part in content.parts:
        match part:
            case TextPart(text=text):
                lines.append(text)
            case ThoughtPart():
                pass  # reasoning is the model's scratch work, not the conversation
            case FunctionCallPart(function_call=call):
                lines.append(f"[tool call {call.name} {orjson.dumps(call.args).decode()}]")
            case FunctionResponsePart(function_response=response):
                outcome = "error" if response.is_error else "result"
                lines.append(f"[tool {outcome} of {response.name}: {tool_result_text(response)}]")
    if content.role == "model":
        speaker = "Agent"
    elif all(isinstance(p, FunctionResponsePart) for p in content.parts):
        speaker = "Tools"
    else:
        speaker = "User"
    return f"{speaker}: " + "\n".join(lines)


def render_transcript(history: Sequence[Content]) -> str:
    """``history`` as plain text, wire-neutral: a summary request carries no tool pairs."""
    return "\n\n".join(_render(content) for content in history)


def split_history(history: Sequence[Content], used: int, keep_tokens: int) -> Split | None:
    """Where to cut ``history`` so that about ``keep_tokens`` of it stay verbatim.

    ``used`` (the tokens the last request used) is spread over the messages in
    proportion to their text, to estimate each one's share. The cut goes before
    the earliest model message whose tail still fits ``keep_tokens``, and at
    least before the last model message, so something is always summarised;
    None when no cut leaves anything to summarise.
    """
    cuts = [i for i in range(1, len(history)) if history[i].role == "model"]
    if not cuts:
        return None
    sizes = [len(_render(content)) + 1 for content in history]
    total = sum(sizes)
    best = cuts[-1]
    for cut in reversed(cuts):
        if sum(sizes[cut:]) * used / total > keep_tokens:
            break
        best = cut
    return Split(best)


def summary_prompt(older: Sequence[Content]) -> tuple[Content, ...]:
    """The history of the summary request: one user message holding the transcript."""
    text = "Summarise this conversation:\n\n" + render_transcript(older)
    return (Content("user", (TextPart(text),)),)


def summary_message(summary: str) -> Content:
    """The message that stands for the summarised messages in what the model is sent."""
    return Content("user", (TextPart(SUMMARY_HEADER + summary),))


_OVERFLOW_PHRASES = ("context length", "context_length", "prompt is too long", "too many tokens")


def context_overflow(error: StreamError) -> bool:
    """Whether the provider refused a request for not fitting the model's context window.

    HTTP 413 (``request_too_large``) on either wire, or the wording the APIs use for a
    prompt over the window (Anthropic's "prompt is too long", OpenAI's "maximum context
    length"), which arrives as a plain 400.
    """
    if error.kind == "request_too_large" or error.status == 413:
        return True
    message = error.message.lower()
    return error.kind == "invalid_request" and any(p in message for p in _OVERFLOW_PHRASES)


def _prompt_bytes(prompt: Sequence[Part]) -> int:
    return sum(len(p.text.encode()) for p in prompt if isinstance(p, TextPart))


def oversized_prompt(prompt: Sequence[Part], window: int) -> bool:
    """Whether ``prompt`` is certainly too big for a ``window``-token context on its own.

    Deliberately lenient (``MOST_BYTES_PER_TOKEN``): refusing a prompt that would
    have fitted is worse than one request the provider refuses, which the turn
    also survives (the prompt then leaves the history).
    """
    return _prompt_bytes(prompt) > MOST_BYTES_PER_TOKEN * window


def prompt_too_large_message(prompt: Sequence[Part], window: int, reason: str | None) -> str:
    """What the editor is told when a prompt did not fit: its size, the window, what to do.

    ``reason`` is the provider's refusal, if it came to one (the prompt then did not
    fit together with the conversation before it); None when it was refused up front.
    """
    chars = sum(len(p.text) for p in prompt if isinstance(p, TextPart))
    tokens = -(-_prompt_bytes(prompt) // BYTES_PER_TOKEN)
    size = f"{chars:,} characters, about {tokens:,} tokens"
    if reason is None:
        what = (
            f"The message is too large for the model's context window: {size}, "
            f"against a window of {window:,} tokens."
        )
    else:
        what = (
            f"The message does not fit the model's context window of {window:,} tokens "
            f"together with the conversation so far ({size}); the provider refused it: {reason}."
        )
    return (
        f"{what} It was not sent to the model and is not part of the conversation, which "
        "goes on as before it. Send a shorter message, or save the text to a file in the "
        "workspace and ask the agent to read it: it reads files in parts."
    )


def prompt_refused_note(message: str) -> dict[str, Any]:
    """The ``agent_thought_chunk`` recorded after a prompt the model could not take, so a
    replay does not show it as answered; ``_meta`` marks it for clients."""
    note = agent_thought_chunk(f"\n[{message}]\n")
    note["_meta"] = {"contextOverflow": {"promptDropped": True}}
    return note


def compaction_note(messages: int) -> dict[str, Any]:
    """The ``agent_thought_chunk`` telling the editor that ``messages`` earlier messages were
    compacted; set apart like a retry notice, with the count in ``_meta`` for clients."""
    noun = "message" if messages == 1 else "messages"
    text = (
        f"\n[compacted {messages} earlier {noun} into a summary to stay within the "
        "model's context window]\n"
    )
    note = agent_thought_chunk(text)
    note["_meta"] = {"compaction": {"summarisedMessages": messages}}
    return note


def compaction_failed_note(error: str) -> dict[str, Any]:
    """The ``agent_thought_chunk`` telling the editor that the history stays whole."""
    text = f"\n[could not compact the conversation ({error}); continuing with the full history]\n"
    note = agent_thought_chunk(text)
    note["_meta"] = {"compaction": {"failed": error}}
    return note
