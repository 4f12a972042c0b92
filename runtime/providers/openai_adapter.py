"""OpenAI Chat Completions SSE chunks -> Gemini-compatible chunks plus preparations.

Pure and synchronous, like the Anthropic adapter. Text (``delta.content``,
``delta.refusal``) and reasoning (``reasoning_content`` / ``reasoning``) are
passed on as they arrive. Tool calls go through a stream-local parser
(``OpenAIToolCalls``, whose module says how it reads what OpenAI-compatible
servers send) and are completed only when a ``finish_reason`` arrives (or
``[DONE]`` without one), in tool-index order, with their arguments parsed
unchanged. Only choice 0 is read (we never request ``n > 1``; other choices are
ignored so they cannot corrupt choice 0). An error inside the stream becomes the
``StreamError`` ``in_band_error`` maps it to.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from toolprep.messages.content import (
    FinishReason,
    GenerateContentResponse,
    Part,
    TextPart,
    ThoughtPart,
    Usage,
)
from toolprep.messages.preparation import ToolCallPreparation, set_preparations
from toolprep.runtime.providers.base import StreamError
from toolprep.runtime.providers.chunks import chunk, text_chunk
from toolprep.runtime.providers.errors import malformed
from toolprep.runtime.providers.openai_errors import in_band_error
from toolprep.runtime.providers.openai_tool_calls import OpenAIToolCalls

__all__ = ["FINISH_REASONS", "OpenAIStreamAdapter"]

FINISH_REASONS: dict[str, FinishReason] = {
    "stop": FinishReason.STOP,
    "tool_calls": FinishReason.STOP,
    "function_call": FinishReason.STOP,
    "eos": FinishReason.STOP,
    "length": FinishReason.MAX_TOKENS,
    "max_tokens": FinishReason.MAX_TOKENS,
    "content_filter": FinishReason.REFUSAL,
}

_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError
_DONE = ("[DONE]", b"[DONE]")


class _Step:
    """What one general-path event adds: parts, call announcements, a finish reason."""

    __slots__ = ("finish", "parts", "preparations")

    def __init__(self) -> None:
        self.parts: list[Part] | None = None
        self.preparations: list[ToolCallPreparation] | None = None
        self.finish: str | None = None

    def add(self, part: Part) -> None:
        if self.parts is None:
            self.parts = [part]
        else:
            self.parts.append(part)


class OpenAIStreamAdapter:
    """One stream's state; ``tool_names`` are the request's declared tools (optional)."""

    __slots__ = (
        "_append_arguments",
        "_done",
        "_finished",
        "_model",
        "_refused",
        "_response_id",
        "_tools",
        "_usage",
    )

    def __init__(self, tool_names: Iterable[str] = ()) -> None:
        self._tools = OpenAIToolCalls(tool_names)
        # Bound once: the hot path calls it for nearly every argument fragment.
        self._append_arguments = self._tools.append_arguments
        self._usage: Usage | None = None
        self._response_id: str | None = None
        self._model: str | None = None
        self._finished = False
        self._done = False
        self._refused = False

    @property
    def finished(self) -> bool:
        """True once a finish reason or ``[DONE]`` was seen."""
        return self._finished

    # --- public interface ---------------------------------------------------------

    def feed(self, event: str | None, data: str | bytes) -> list[GenerateContentResponse]:
        """Consume one SSE event; returns the chunks it completes (often none)."""
        try:
            obj = _loads(data)
        except _JSONDecodeError as exc:
            if data in _DONE:
                return self._on_done()
            raise malformed(f"OpenAI stream sent a data line that is not JSON ({exc})") from None
        if type(obj) is not dict:
            raise malformed(f"OpenAI stream sent a JSON {type(obj).__name__}, expected an object")
        choices = obj.get("choices")
        if event is None and type(choices) is list and len(choices) == 1:
            hot = self._hot_path(choices[0], obj)
            if hot is not None:
                return hot
        return self._event(event, obj, choices)

    def _hot_path(self, choice: Any, obj: dict[str, Any]) -> list[GenerateContentResponse] | None:
        """The common events, inlined: a delta with one text piece, or one more argument
        fragment for a call already announced. ``None`` sends anything else the general way."""
        if (
            type(choice) is not dict
            or choice.get("finish_reason")
            or choice.get("index")
            or obj.get("usage")
        ):
            return None
        delta = choice.get("delta")
        if type(delta) is not dict or len(delta) != 1:
            return None
        text = delta.get("content")
        if text and type(text) is str and self._response_id is not None:
            return [text_chunk(text, self._response_id, self._model)]
        items = delta.get("tool_calls")
        if type(items) is list and len(items) == 1 and not self._finished:
            return [] if self._append_arguments(items[0]) else None
        return None

    def _on_done(self) -> list[GenerateContentResponse]:
        self._done = True
        if self._finished:
            return []
        return [self._finish(None, None, "stop")]

    def _event(
        self, event: str | None, obj: dict[str, Any], choices: Any
    ) -> list[GenerateContentResponse]:
        """Everything but the hot path: text, reasoning, identities, finish, usage, errors."""
        error = obj.get("error")
        if error:
            raise in_band_error(error)
        if event == "error":
            raise StreamError(orjson.dumps(obj).decode(), retryable=False, kind="provider")
        if self._response_id is None:
            self._read_identity(obj)
        usage = obj.get("usage")
        if usage:
            self._usage = self._read_usage(usage)
        step = _Step()
        if choices and type(choices) is list:
            for choice in choices:
                if type(choice) is dict and not choice.get("index"):
                    self._choice(choice, step)  # only choice 0 (we never ask for more)
        return self._emit(step, bool(usage))

    def _read_identity(self, obj: dict[str, Any]) -> None:
        response_id = obj.get("id")
        model = obj.get("model")
        self._response_id = response_id if type(response_id) is str else None
        self._model = model if type(model) is str else None

    def _choice(self, choice: dict[str, Any], step: _Step) -> None:
        delta = choice.get("delta")
        if delta and type(delta) is dict:
            self._delta(delta, step)
        reason = choice.get("finish_reason")
        if reason and type(reason) is str:
            step.finish = reason

    def _delta(self, delta: dict[str, Any], step: _Step) -> None:
        """One delta's tool-call items, reasoning, text and refusal, in that order."""
        tool_calls = delta.get("tool_calls")
        if tool_calls and type(tool_calls) is list and not self._finished:
            step.preparations = self._tools.read_items(tool_calls, step.preparations)
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning and type(reasoning) is str:
            step.add(ThoughtPart(reasoning))
        text = delta.get("content")
        if text and type(text) is str:
            step.add(TextPart(text))
        refusal = delta.get("refusal")
        if refusal and type(refusal) is str:
            self._refused = True
            step.add(TextPart(refusal))

    def _emit(self, step: _Step, has_usage: bool) -> list[GenerateContentResponse]:
        """The chunks one event's ``step`` makes: the finish, a trailing usage, or its parts."""
        parts, preparations = step.parts, step.preparations
        if step.finish is not None and not self._finished:
            return [self._finish(parts, preparations, step.finish)]
        if parts is None and preparations is None:
            if has_usage and self._finished and self._usage is not None:
                return [self._chunk((), None, self._usage)]  # trailing usage-only chunk
            return []
        if preparations is None and parts is not None and len(parts) == 1:
            (part,) = parts
            if type(part) is TextPart:
                return [text_chunk(part.text, self._response_id, self._model)]
        out = self._chunk(tuple(parts) if parts else (), None, None)
        if preparations:
            set_preparations(out, preparations)
        return [out]

    def end(self) -> list[GenerateContentResponse]:
        """Call at EOF. A finish reason without ``[DONE]`` still counts as a normal end."""
        if not self._finished:
            raise StreamError(
                "OpenAI stream ended without a finish_reason or [DONE]",
                retryable=True,
                kind="truncated",
            )
        return []

    # --- helpers ------------------------------------------------------------------

    def _chunk(
        self, parts: tuple[Part, ...], reason: FinishReason | None, usage: Usage | None
    ) -> GenerateContentResponse:
        return chunk(parts, reason, usage, self._response_id, self._model)

    @staticmethod
    def _read_usage(usage: Any) -> Usage | None:
        if type(usage) is not dict:
            return None
        prompt = usage.get("prompt_tokens")
        completion = usage.get("completion_tokens")
        return Usage(
            prompt if type(prompt) is int else 0, completion if type(completion) is int else 0
        )

    def _finish(
        self,
        parts: list[Part] | None,
        preparations: list[ToolCallPreparation] | None,
        raw_reason: str,
    ) -> GenerateContentResponse:
        self._finished = True
        reason = FINISH_REASONS.get(raw_reason, FinishReason.OTHER)
        if self._refused and reason is FinishReason.STOP:
            reason = FinishReason.REFUSAL
        out: list[Part] = parts if parts is not None else []
        preparations = self._tools.complete(out, preparations, reason, raw_reason)
        chunk = self._chunk(tuple(out), reason, self._usage)
        if preparations:
            set_preparations(chunk, preparations)
        return chunk
