"""The tool calls of one OpenAI Chat Completions stream, assembled from their fragments.

Tool calls arrive as ``delta.tool_calls`` items spread over many SSE events;
this parser joins them into calls, announces each call (a
``ToolCallPreparation``) as soon as its id and name are certain, and at the
finish turns them into ``FunctionCallPart``s, in tool-index order, with their
arguments parsed unchanged.

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

from toolprep.messages.content import (
    FinishReason,
    FunctionCall,
    FunctionCallPart,
    Part,
    ThoughtPart,
)
from toolprep.messages.preparation import ToolCallPreparation
from toolprep.runtime.providers.errors import malformed
from toolprep.runtime.providers.json_args import ArgumentsError, parse_arguments

__all__ = ["OpenAIToolCalls"]


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


class OpenAIToolCalls:
    """One stream's tool calls; ``tool_names`` are the request's declared tools (optional)."""

    __slots__ = (
        "_by_id",
        "_by_index",
        "_calls",
        "_generated",
        "_issued_ids",
        "_known",
        "_last",
        "_next_suffix",
        "_sorted",
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
        self._generated = 0

    def append_arguments(self, item: Any) -> bool:
        """True when ``item`` only adds argument text to an announced call (and it was added):
        the stream's most common event, so the adapter's hot path asks this first."""
        if type(item) is not dict or len(item) != 2:
            return False
        call = self._by_index.get(item.get("index"))
        function = item.get("function")
        if call is None or not call.prepared or type(function) is not dict or len(function) != 1:
            return False
        arguments = function.get("arguments")
        if type(arguments) is not str:
            return False
        self._last = call
        if arguments:
            call.fragments.append(arguments)
            call.has_args = True
        return True

    def read_items(
        self, items: list[Any], preparations: list[ToolCallPreparation] | None
    ) -> list[ToolCallPreparation] | None:
        """Fold one delta's ``tool_calls`` items in; returns ``preparations`` with the calls
        this made certain appended (a new list when it was ``None`` and one was)."""
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

    def complete(
        self,
        out: list[Part],
        preparations: list[ToolCallPreparation] | None,
        reason: FinishReason,
        raw_reason: str,
    ) -> list[ToolCallPreparation] | None:
        """At the finish: append every call to ``out`` in tool-index order (its signature
        first, if any), announcing those not announced yet; returns ``preparations``."""
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
        return preparations
