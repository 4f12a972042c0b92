"""Anthropic Messages SSE events -> Gemini-compatible chunks plus preparations.

Pure and synchronous: the provider feeds it decoded SSE events and yields
whatever it returns, so every rule here is testable without a network.

The rules that matter for tool cards:

- ``content_block_start`` of a ``tool_use`` block whose ``id`` and ``name``
  are non-empty strings yields one otherwise empty chunk carrying a single
  ``ToolCallPreparation``, before any of that block's argument data.
- A replayed opener (another ``content_block_start`` for an id this stream
  already opened) neither prepares again nor starts a second call: at the
  same index the open block keeps its arguments, at another index the
  duplicate block is ignored to its stop.
- ``input_json_delta`` fragments are only accumulated: no argument data is
  exposed before ``content_block_stop``, which yields the complete
  ``FunctionCallPart`` with parsed arguments (``{}`` when empty).
- A tool_use block without a usable id or name gets no preparation; its
  call is still emitted at stop, with a generated ``toolu_gen_<n>`` id when
  the id is missing.
- Argument text that is not a JSON object never becomes a call: a
  half-parsed call must never execute. Whether it fails the attempt waits
  for the stop reason, because with eager (fine-grained) input streaming the
  API sends tool input unvalidated and a response cut by the token limit
  ends mid-value, and ``message_delta`` only comes after the block's stop.
  Cut by the limit (``max_tokens``, ``model_context_window_exceeded``): the
  call is dropped, the tracker discards its card as a preparation whose call
  never came, and the turn stops at max_tokens; a retry would only be cut
  again. Any other stop reason, a further content block or a stream that
  stops without ``message_delta`` fails the attempt with a retryable
  ``malformed`` error.

Everything else: text / thinking / signature deltas become parts as they
arrive, ``redacted_thinking`` becomes a ``ThoughtPart`` whose signature is
the block's data with ``REDACTED_THINKING_PREFIX`` (so the request builder
can send it back as the right block type), ``message_delta`` becomes a final
chunk with the finish reason and usage, ``ping`` and unknown event, block
and delta types are ignored. Dispatch is on the JSON ``type`` string; the
SSE event name is only consulted for ``event: error``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from toolprep.messages.content import (
    FinishReason,
    FunctionCall,
    FunctionCallPart,
    GenerateContentResponse,
    Part,
    TextPart,
    ThoughtPart,
    Usage,
)
from toolprep.messages.preparation import ToolCallPreparation, set_preparations
from toolprep.runtime.providers.base import StreamError
from toolprep.runtime.providers.chunks import chunk, text_chunk, thought_chunk
from toolprep.runtime.providers.errors import anthropic_error_kind, malformed
from toolprep.runtime.providers.json_args import ArgumentsError, parse_arguments

__all__ = ["REDACTED_THINKING_PREFIX", "STOP_REASONS", "AnthropicStreamAdapter"]

REDACTED_THINKING_PREFIX = "anthropic-redacted-thinking:"
"""Marks a ThoughtPart signature that holds a ``redacted_thinking`` block's data."""

STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "tool_use": FinishReason.STOP,
    "max_tokens": FinishReason.MAX_TOKENS,
    "model_context_window_exceeded": FinishReason.MAX_TOKENS,
    "refusal": FinishReason.REFUSAL,
}

_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError


class _ToolBlock:
    """Argument text of one open tool_use block."""

    __slots__ = ("call_id", "fragments", "initial", "name", "replayed")

    def __init__(self, call_id: str, name: str, initial: Any, replayed: bool = False) -> None:
        self.call_id = call_id
        self.name = name
        self.fragments: list[str] = []
        self.initial = initial
        self.replayed = replayed


def _usage_tokens(usage: Any) -> tuple[int | None, int | None]:
    """``(input, output)`` from an Anthropic usage object; input counts cached tokens too."""
    if type(usage) is not dict:
        return None, None
    total_in: int | None = None
    for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
        value = usage.get(key)
        if type(value) is int:
            total_in = (total_in or 0) + value
    out = usage.get("output_tokens")
    return total_in, out if type(out) is int else None


class AnthropicStreamAdapter:
    """One stream's state. Not shared: each attempt builds its own adapter."""

    __slots__ = (
        "_args",
        "_cut",
        "_generated",
        "_input_tokens",
        "_model",
        "_output_tokens",
        "_response_id",
        "_seen_ids",
        "_started",
        "_stopped",
        "_tools",
        "_usage_seen",
    )

    def __init__(self) -> None:
        self._tools: dict[Any, _ToolBlock] = {}
        # index -> the open block's fragment list (the same list object), for the hot path
        self._args: dict[Any, list[str]] = {}
        self._seen_ids: set[str] = set()  # every tool_use id this stream has opened
        self._response_id: str | None = None
        self._model: str | None = None
        self._input_tokens = 0
        self._output_tokens = 0
        self._usage_seen = False
        self._started = False
        self._stopped = False
        self._generated = 0
        # The error for a tool block whose input did not parse, held until the stop
        # reason says whether the token limit cut it (see the module docstring).
        self._cut: StreamError | None = None

    @property
    def finished(self) -> bool:
        """True once ``message_stop`` was seen."""
        return self._stopped

    # --- public interface ---------------------------------------------------------

    def feed(self, event: str | None, data: str | bytes) -> list[GenerateContentResponse]:
        """Consume one SSE event; returns the chunks it completes (often none)."""
        try:
            obj = _loads(data)
        except _JSONDecodeError as exc:
            raise malformed(f"Anthropic stream sent a data line that is not JSON ({exc})") from None
        try:
            kind = obj.get("type")
        except AttributeError:
            raise malformed(
                f"Anthropic stream sent a JSON {type(obj).__name__}, expected an object"
            ) from None
        if kind == "content_block_delta":
            # The hot path, inlined: in tool-heavy streams most events are argument
            # fragments. Type checks are left to exceptions here (a fragment that is not a
            # string fails the join at block stop) since each check costs on every event.
            delta = obj.get("delta")
            try:
                arguments = delta.get("type") == "input_json_delta"
            except AttributeError:
                return []  # a delta that is not an object: ignored like any unknown shape
            if arguments:
                fragments = self._args.get(obj.get("index"))
                if fragments is not None:
                    fragment = delta.get("partial_json")
                    if fragment:
                        fragments.append(fragment)
                return []
            return self._on_delta(obj)
        handler = _HANDLERS.get(kind)
        if handler is not None:
            return handler(self, obj)
        if event == "error":
            return self._on_error(obj)
        return []

    def end(self) -> list[GenerateContentResponse]:
        """Call at EOF. A stream that ends before ``message_stop`` was cut short."""
        if not self._stopped:
            raise StreamError(
                "Anthropic stream ended before message_stop", retryable=True, kind="truncated"
            )
        return []

    # --- helpers ------------------------------------------------------------------

    def _chunk(self, parts: tuple[Part, ...]) -> GenerateContentResponse:
        return chunk(parts, None, None, self._response_id, self._model)

    def _read_usage(self, usage: Any) -> None:
        tokens_in, tokens_out = _usage_tokens(usage)
        if tokens_in is not None:
            self._input_tokens = tokens_in
            self._usage_seen = True
        if tokens_out is not None:
            self._output_tokens = tokens_out
            self._usage_seen = True

    # --- handlers -----------------------------------------------------------------

    def _on_delta(self, obj: dict[str, Any]) -> list[GenerateContentResponse]:
        delta = obj.get("delta")
        if type(delta) is not dict:
            return []
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text")
            if text and type(text) is str:
                return [text_chunk(text, self._response_id, self._model)]
        elif kind == "thinking_delta":
            text = delta.get("thinking")
            if text and type(text) is str:
                return [thought_chunk(text, None, self._response_id, self._model)]
        elif kind == "signature_delta":
            signature = delta.get("signature")
            if signature and type(signature) is str:
                return [thought_chunk("", signature, self._response_id, self._model)]
        return []

    def _on_block_start(self, obj: dict[str, Any]) -> list[GenerateContentResponse]:
        if self._cut is not None:
            # The stream went on after the unparsable input, so no token limit cut it.
            raise self._cut
        block = obj.get("content_block")
        if type(block) is not dict:
            return []
        kind = block.get("type")
        if kind == "tool_use":
            return self._start_tool(obj.get("index"), block)
        if kind == "text":
            text = block.get("text")
            if type(text) is str and text:
                return [self._chunk((TextPart(text),))]
        elif kind == "thinking":
            text = block.get("thinking")
            signature = block.get("signature")
            text = text if type(text) is str else ""
            signature = signature if type(signature) is str and signature else None
            if text or signature:
                return [self._chunk((ThoughtPart(text, signature),))]
        elif kind == "redacted_thinking":
            data = block.get("data")
            if type(data) is str and data:
                return [self._chunk((ThoughtPart("", REDACTED_THINKING_PREFIX + data),))]
        return []

    def _start_tool(self, index: Any, block: dict[str, Any]) -> list[GenerateContentResponse]:
        call_id = block.get("id")
        name = block.get("name")
        name = name if type(name) is str else ""
        identified = type(call_id) is str and call_id != "" and name != ""
        existing = self._tools.get(index)
        if existing is not None and existing.call_id == call_id:
            return []  # a replayed opener for the block already open: keep its arguments
        if type(call_id) is not str or not call_id:
            self._generated += 1
            call_id = f"toolu_gen_{self._generated}"
        elif call_id in self._seen_ids:
            # The same call opened again at another index (a replayed block): the call
            # exists already, and a second call with one id would run twice and be
            # rejected in history, so this block is ignored to its stop.
            self._tools[index] = _ToolBlock(call_id, "", None, replayed=True)
            self._args.pop(index, None)
            return []
        else:
            self._seen_ids.add(call_id)
        opened = _ToolBlock(call_id, name, block.get("input"))
        self._tools[index] = opened
        self._args[index] = opened.fragments
        if not identified:
            return []
        chunk = self._chunk(())
        set_preparations(chunk, (ToolCallPreparation(call_id, name),))
        return [chunk]

    def _on_block_stop(self, obj: dict[str, Any]) -> list[GenerateContentResponse]:
        index = obj.get("index")
        self._args.pop(index, None)
        block = self._tools.pop(index, None)
        if block is None or block.replayed:
            return []
        try:
            text = "".join(block.fragments)
        except TypeError:
            raise malformed(
                f"tool call {block.call_id} ({block.name}): partial_json was not a string"
            ) from None
        if text:
            try:
                args, _ = parse_arguments(text)
            except ArgumentsError as exc:
                self._cut = malformed(f"tool call {block.call_id} ({block.name}): {exc}")
                return []
        else:
            # No deltas at all: some gateways put the whole input in the opener.
            args = dict(block.initial) if type(block.initial) is dict else {}
        return [self._chunk((FunctionCallPart(FunctionCall(block.call_id, block.name, args)),))]

    def _on_message_start(self, obj: dict[str, Any]) -> list[GenerateContentResponse]:
        if self._started:
            raise StreamError(
                "Anthropic stream sent a second message_start", retryable=True, kind="protocol"
            )
        self._started = True
        message = obj.get("message")
        if type(message) is dict:
            response_id = message.get("id")
            model = message.get("model")
            self._response_id = response_id if type(response_id) is str else None
            self._model = model if type(model) is str else None
            self._read_usage(message.get("usage"))
        return []

    def _on_message_delta(self, obj: dict[str, Any]) -> list[GenerateContentResponse]:
        delta = obj.get("delta")
        reason: FinishReason | None = None
        if type(delta) is dict:
            stop_reason = delta.get("stop_reason")
            if type(stop_reason) is str:
                reason = STOP_REASONS.get(stop_reason, FinishReason.OTHER)
        if self._cut is not None:
            if reason is not FinishReason.MAX_TOKENS:
                raise self._cut
            self._cut = None  # cut by the limit: the call is dropped, the turn stops
        # message_delta usage counts are cumulative for the whole message.
        self._read_usage(obj.get("usage"))
        usage = Usage(self._input_tokens, self._output_tokens) if self._usage_seen else None
        return [chunk((), reason, usage, self._response_id, self._model)]

    def _on_message_stop(self, obj: dict[str, Any]) -> list[GenerateContentResponse]:
        if self._cut is not None:
            raise self._cut  # no stop reason came to say the token limit cut it
        self._stopped = True
        return []

    def _on_error(self, obj: dict[str, Any]) -> list[GenerateContentResponse]:
        error = obj.get("error")
        error = error if type(error) is dict else {}
        error_type = error.get("type")
        error_type = error_type if type(error_type) is str else "unknown_error"
        message = error.get("message")
        kind, retryable = anthropic_error_kind(error_type)
        raise StreamError(
            message if type(message) is str and message else error_type,
            retryable=retryable,
            kind=kind,
        )


_HANDLERS: dict[
    Any, Callable[[AnthropicStreamAdapter, dict[str, Any]], list[GenerateContentResponse]]
] = {
    "content_block_start": AnthropicStreamAdapter._on_block_start,
    "content_block_stop": AnthropicStreamAdapter._on_block_stop,
    "message_start": AnthropicStreamAdapter._on_message_start,
    "message_delta": AnthropicStreamAdapter._on_message_delta,
    "message_stop": AnthropicStreamAdapter._on_message_stop,
    "error": AnthropicStreamAdapter._on_error,
}
