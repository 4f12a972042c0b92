"""OpenAI Chat Completions SSE chunks -> Gemini-compatible chunks plus preparations.

Pure and synchronous, like the Anthropic adapter. Text (``delta.content``,
``delta.refusal``) and reasoning (``reasoning_content`` / ``reasoning``) are
passed on as they arrive. Tool calls go through a stream-local parser and
are completed only when a ``finish_reason`` arrives (or ``[DONE]`` without
one), in tool-index order, with their arguments parsed unchanged.

The parser keys calls by tool index within choice 0 (we never request
``n > 1``; other choices are ignored so they cannot corrupt choice 0) and
is built to survive what OpenAI-compatible servers actually send:

Matching a ``tool_calls`` item to a call
  1. a non-empty ``id`` seen before in this stream, at the same ``index``
     or with none -> that call (servers that repeat the identity on every
     fragment; a replayed opener);
  2. a known ``id`` at a *different* index -> the call at that index that
     came with the same id, else a new, distinct call: some servers give
     every parallel call one id. Merging them would run one call under
     the concatenation of both names; rejecting the response would fail
     every parallel turn on such a server. So the second call keeps its
     own name and arguments under a derived id, ``<id>_2`` (``_3``, ...;
     never an id already used in the response), and that id is what the
     card, the tool result and the history sent back to the model carry,
     which keeps the conversation consistent;
  3. else an ``index`` with an open call -> that call, unless the item
     carries a different non-empty id *and* a non-empty name: then it is a
     new call reusing the index (parallel calls sent one after another, or
     two entries with one index in one chunk). A new id with an empty or
     missing name is the same call: some proxies (one in front of OCI
     models) mint a fresh id for every argument fragment, and the index is
     what the OpenAI SDK's own accumulator goes by;
  4. else, with no ``index``: a new id starts a new call at the next free
     index; an item with neither continues the most recent call.

Names (``""`` and missing fragments are ignored)
  the first fragment is the name; a fragment equal to the name so far is a
  repeat (identity resent on every chunk) and is dropped; a fragment that
  extends the name so far is a cumulative resend and replaces it; any other
  fragment is appended (a name split as ``"get_"`` + ``"weather"``). The one
  ambiguous case, a name split into two identical halves, is read as a
  repeat unless the declared tool names say otherwise.

Preparations
  A call is announced once, the first time it has both a non-empty id and
  name, on the chunk produced for that SSE event. Every call gets an id of
  its own (rule 2), so an id is never announced twice. When
  the request declared its tool names the announcement waits until the name
  is certainly complete: it is a declared name that no other declared name
  extends, or argument text has started (names always precede arguments),
  or the call finished. Without declared names a split name would be
  announced by its first fragment; the complete call still carries the
  full name. A request may declare thousands of names (MCP servers' tools),
  so no question about them scans them all: "is it declared" is a set
  lookup, and "does a declared name start with it" a binary search in
  the names sorted once, on the first call that asks.

Arguments
  at finish the text must be a JSON object (empty -> ``{}``). Only when the
  server says the token limit ended the reply (``length``) is text cut off
  mid-object repaired, and only when closing quotes and brackets yields the
  one possible reading; text cut past repair then yields no call at all (its
  card is discarded, the turn stops at ``max_tokens``). Under any other
  finish reason a cut-off text is not a truncation the server owned up to:
  it fails the attempt with a retryable ``malformed`` error rather than run
  a guessed reading. The finish reason is always the server's own.

Calls without a name
  are passed on with an empty name: the turn loop never runs them (there is
  nothing to run), it shows them as discarded.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
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
from toolprep.runtime.providers.chunks import chunk, text_chunk
from toolprep.runtime.providers.errors import (
    malformed,
    preview,
    status_kind,
    status_retryable,
)
from toolprep.runtime.providers.json_args import ArgumentsError, parse_arguments

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

# In-band error ``type`` / ``code`` values worth a new attempt.
_RETRYABLE_ERRORS = {
    "server_error": "server",
    "internal_error": "server",
    "internal_server_error": "server",
    "api_error": "server",
    "service_unavailable": "server",
    "bad_gateway": "server",
    "timeout": "timeout",
    "rate_limit_exceeded": "rate_limit",
    "rate_limit_error": "rate_limit",
    "requests": "rate_limit",
    "tokens": "rate_limit",
    "overloaded": "overloaded",
    "overloaded_error": "overloaded",
    "engine_overloaded": "overloaded",
}
# Codes that say the model's own output was unusable: a new sample may well succeed.
# Checked before ``type``, which on these is the generic ``invalid_request_error``.
_MODEL_OUTPUT_ERRORS = {
    "tool_use_failed": "the provider could not read the model's tool call",
    "json_validate_failed": "the provider could not read the model's JSON output",
}
_FINAL_ERRORS = {
    "insufficient_quota": "billing",
    "invalid_request_error": "invalid_request",
    "invalid_api_key": "auth",
    "authentication_error": "auth",
    "permission_error": "permission",
    "context_length_exceeded": "request_too_large",
}


class _Call:
    """One tool call being assembled."""

    __slots__ = (
        "args_obj",
        "call_id",
        "fragments",
        "has_args",
        "index",
        "name",
        "prepared",
        "provider_id",
        "seq",
        "signature",
    )

    def __init__(self, seq: int, index: int) -> None:
        self.seq = seq
        self.index = index
        self.provider_id: str | None = None
        """The id as the server sent it; ``call_id`` is unique in the response."""
        self.call_id: str | None = None
        self.name = ""
        self.fragments: list[str] = []
        self.args_obj: dict[str, Any] | None = None
        self.has_args = False
        self.prepared = False
        self.signature: str | None = None


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


def _in_band_error(error: Any) -> StreamError:
    """``{"error": ...}`` inside the stream, in the shapes OpenAI-compatible servers use."""
    if type(error) is not dict:
        return StreamError(str(error) or "provider error", retryable=False, kind="provider")
    message = error.get("message")
    message = message if type(message) is str and message else "provider error"
    code = error.get("code")
    if type(code) is str and code.lower() in _MODEL_OUTPUT_ERRORS:
        # Groq's ``tool_use_failed``: the model wrote a call the server could not parse.
        # Nothing was wrong with the request, so a retry samples the model again.
        what = _MODEL_OUTPUT_ERRORS[code.lower()]
        text = f"{what} ({code}): {message}"
        failed = error.get("failed_generation")
        if type(failed) is str and failed.strip():
            text += f" The model had written: {preview(failed)}"
        return StreamError(text, retryable=True, kind="malformed")
    labels = [v.lower() for v in (code, error.get("type")) if type(v) is str]
    for label in labels:
        if label in _FINAL_ERRORS:
            return StreamError(message, retryable=False, kind=_FINAL_ERRORS[label])
    for label in labels:
        if label in _RETRYABLE_ERRORS:
            return StreamError(message, retryable=True, kind=_RETRYABLE_ERRORS[label])
    for key in ("code", "status", "status_code"):
        status = error.get(key)
        if type(status) is int and 400 <= status < 600:
            return StreamError(
                message, retryable=status_retryable(status), kind=status_kind(status), status=status
            )
    return StreamError(message, retryable=False, kind="provider")


class OpenAIStreamAdapter:
    """One stream's state; ``tool_names`` are the request's declared tools (optional)."""

    __slots__ = (
        "_by_id",
        "_by_index",
        "_calls",
        "_done",
        "_finished",
        "_generated",
        "_issued_ids",
        "_known",
        "_last",
        "_model",
        "_next_suffix",
        "_refused",
        "_response_id",
        "_sorted",
        "_usage",
    )

    def __init__(self, tool_names: Iterable[str] = ()) -> None:
        self._known = frozenset(tool_names)
        self._sorted: list[str] | None = None  # the declared names in order, once asked
        self._calls: list[_Call] = []
        self._by_index: dict[Any, _Call] = {}
        self._by_id: dict[str, _Call] = {}  # provider id -> the first call that used it
        self._issued_ids: set[str] = set()
        self._next_suffix: dict[str, int] = {}  # provider id -> the next ``_<n>`` to try
        self._last: _Call | None = None
        self._usage: Usage | None = None
        self._response_id: str | None = None
        self._model: str | None = None
        self._finished = False
        self._done = False
        self._refused = False
        self._generated = 0

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
            return self._hot_arguments(items[0])
        return None

    def _hot_arguments(self, item: Any) -> list[GenerateContentResponse] | None:
        """``[]`` when ``item`` only adds argument text to an announced call, else ``None``."""
        if type(item) is not dict or len(item) != 2:
            return None
        call = self._by_index.get(item.get("index"))
        function = item.get("function")
        if call is None or not call.prepared or type(function) is not dict or len(function) != 1:
            return None
        arguments = function.get("arguments")
        if type(arguments) is not str:
            return None
        self._last = call
        if arguments:
            call.fragments.append(arguments)
            call.has_args = True
        return []

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
            raise _in_band_error(error)
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
            step.preparations = self._tool_items(tool_calls, step.preparations)
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

    # --- the tool-call parser -----------------------------------------------------

    def _tool_items(
        self, items: list[Any], preparations: list[ToolCallPreparation] | None
    ) -> list[ToolCallPreparation] | None:
        for item in items:
            if type(item) is not dict:
                continue
            index = item.get("index")
            call_id = item.get("id")
            if type(call_id) is not str or not call_id:
                call_id = None
            function = item.get("function")
            named = type(function) is dict and bool(function.get("name"))
            call = self._match(index if type(index) is int else None, call_id, named)
            if call_id is not None and call.provider_id is None:
                call.provider_id = call_id
                call.call_id = self._issue_id(call_id)
                self._by_id.setdefault(call_id, call)
            elif call_id is not None:
                self._by_id.setdefault(call_id, call)  # a fragment's own id: this call
            if type(function) is dict:
                name = function.get("name")
                if name and type(name) is str:
                    self._merge_name(call, name)
                arguments = function.get("arguments")
                if type(arguments) is str:
                    if arguments:
                        call.fragments.append(arguments)
                        call.has_args = True
                elif type(arguments) is dict:
                    call.args_obj = arguments  # some servers send the arguments as an object
                    call.has_args = True
            extra = item.get("extra_content")
            if extra:
                self._read_signature(call, extra)
            if not call.prepared and call.call_id is not None and call.name and self._settled(call):
                preparations = self._prepare(call, preparations)
        return preparations

    def _match(self, index: int | None, call_id: str | None, named: bool) -> _Call:
        if call_id is not None:
            known = self._by_id.get(call_id)
            if known is not None:
                last = self._last
                if index is None and last is not None and last.provider_id == call_id:
                    return last
                if index is None or index == known.index:
                    self._last = known
                    return known
                # The id is taken by a call at another index: this is a distinct call.
                call = self._by_index.get(index)
                if call is None or call.provider_id not in (None, call_id):
                    call = self._new(index)
                self._last = call
                return call
        if index is not None:
            call = self._by_index.get(index)
            if call is None or (call_id is not None and call.provider_id is not None and named):
                # (an open call with a different id and a name here is a new call reusing
                # the index; a different id without a name is one more fragment of it)
                call = self._new(index)
            self._last = call
            return call
        if call_id is None and self._last is not None:
            return self._last
        return self._new(max(self._by_index, default=-1) + 1)

    def _new(self, index: int) -> _Call:
        call = _Call(len(self._calls), index)
        self._calls.append(call)
        self._by_index[index] = call
        self._last = call
        return call

    def _issue_id(self, provider_id: str) -> str:
        """``provider_id`` itself, or ``<id>_2``, ``_3``... when a call of this response has it."""
        issued = provider_id
        n = self._next_suffix.get(provider_id, 2)
        while issued in self._issued_ids:
            issued = f"{provider_id}_{n}"
            n += 1
        self._next_suffix[provider_id] = n
        self._issued_ids.add(issued)
        return issued

    def _merge_name(self, call: _Call, fragment: str) -> None:
        name = call.name
        if not name:
            call.name = fragment
        elif fragment == name:
            doubled = name + fragment
            if self._known and name not in self._known and self._declared_from(doubled):
                call.name = doubled
        elif fragment.startswith(name):
            call.name = fragment
        else:
            call.name = name + fragment

    def _settled(self, call: _Call) -> bool:
        if not self._known or call.has_args:
            return True
        name = call.name
        # A declared name that another declared name extends is never complete on its own.
        return name in self._known and not self._declared_from(name, longer=True)

    def _declared_from(self, prefix: str, *, longer: bool = False) -> bool:
        """Whether a declared name starts with ``prefix`` (and, if ``longer``, is not it).

        In sorted order the names starting with ``prefix`` directly follow where
        ``prefix`` would stand, so one binary search answers.
        """
        names = self._sorted
        if names is None:
            names = self._sorted = sorted(self._known)
        at = bisect_left(names, prefix)
        if longer and at < len(names) and names[at] == prefix:
            at += 1
        return at < len(names) and names[at].startswith(prefix)

    def _prepare(
        self, call: _Call, preparations: list[ToolCallPreparation] | None
    ) -> list[ToolCallPreparation] | None:
        call.prepared = True
        call_id = call.call_id
        if call_id is None:
            return preparations
        if preparations is None:
            preparations = []
        preparations.append(ToolCallPreparation(call_id, call.name))
        return preparations

    @staticmethod
    def _read_signature(call: _Call, extra: Any) -> None:
        """Gemini's OpenAI endpoint puts the call's thought signature in ``extra_content``."""
        google = extra.get("google") if type(extra) is dict else None
        signature = google.get("thought_signature") if type(google) is dict else None
        if type(signature) is str and signature:
            call.signature = signature

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
        for call in sorted(self._calls, key=lambda c: (c.index, c.seq)):
            if not call.prepared and call.call_id is not None and call.name:
                preparations = self._prepare(call, preparations)
            call_id = call.call_id
            if call_id is None:
                self._generated += 1
                call_id = self._issue_id(f"call_gen_{self._generated}")
            if call.args_obj is not None and not call.fragments:
                args = dict(call.args_obj)
            else:
                cut = reason is FinishReason.MAX_TOKENS
                try:
                    args, _ = parse_arguments("".join(call.fragments), allow_repair=cut)
                except ArgumentsError as exc:
                    if cut:
                        # Cut by the token limit past repair: no call comes out, so its card
                        # is discarded and the turn stops at max_tokens, as on Anthropic;
                        # retrying would be cut at the same place again.
                        continue
                    raise malformed(
                        f"tool call {call_id} ({call.name or 'no name'}): {exc}, although the "
                        f"server ended the reply with finish_reason {raw_reason!r}"
                    ) from None
            if call.signature is not None:
                out.append(ThoughtPart("", call.signature))
            out.append(FunctionCallPart(FunctionCall(call_id, call.name, args)))
        chunk = self._chunk(tuple(out), reason, self._usage)
        if preparations:
            set_preparations(chunk, preparations)
        return chunk
