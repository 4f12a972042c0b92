"""The same pipeline without actors: the baseline the actor overhead is measured against.

``DirectRuntime`` offers the ``Runtime`` host API (so the real ``AcpAgent``
and JSON-RPC connection sit in front of it unchanged) but runs the real role
classes' handlers synchronously on one pipeline thread. The role objects are
constructed and never started: pykka builds an actor's inbox and ref in the
constructor and only ``start()`` creates its thread, so ``on_receive(msg)``
on an unstarted actor runs the handler right here. A ``SyncDirectory``
stands in for ``RoleDirectory``: ``tell(role, msg)`` queues the message and
the pipeline thread runs the target's handler as soon as the current one
returns (a trampoline, so handlers never re-enter each other and per-role
message order is the same as with actors).

Two providers feed it:

- the real SDK provider over HTTP from the loopback server, pumped by the
  reader's own ``_pump`` on the pipeline thread's asyncio loop
  (``direct-http``: same transport, no actors);
- ``InProcessProvider``: the loopback server's turn generators, pre-encoded
  as SSE bytes, fed through the real ``SseDecoder`` and stream adapter with
  no network at all (``direct-inproc``: the pure per-event work).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import Future
from typing import Any, Literal

import orjson

from benchmarks import sse_server
from toolprep.messages.content import GenerateContentResponse
from toolprep.runtime.config import ModelRoute
from toolprep.runtime.event_loops import new_stream_loop
from toolprep.runtime.host import Runtime, RuntimeConfig
from toolprep.runtime.providers.anthropic_adapter import AnthropicStreamAdapter
from toolprep.runtime.providers.anthropic_provider import build_messages_params
from toolprep.runtime.providers.base import ModelRequest
from toolprep.runtime.providers.openai_adapter import OpenAIStreamAdapter
from toolprep.runtime.providers.openai_provider import build_chat_params
from toolprep.runtime.providers.sse import SseDecoder
from toolprep.runtime.tools.registry import ToolRegistry

logger = logging.getLogger(__name__)


class _SyncRef:
    """``self.actor_ref`` for a role the pipeline thread runs: ``tell`` goes via the directory."""

    def __init__(self, directory: SyncDirectory, role: str) -> None:
        self._directory = directory
        self._role = role

    def tell(self, message: object) -> None:
        self._directory.tell(self._role, message)


class _SyncPool:
    """Runs a tool call on submit: the bench tool returns at once, and no pool thread is wanted."""

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args))
        except Exception as exc:
            future.set_exception(exc)
        return future

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        return None


class SyncDirectory:
    """``RoleDirectory`` stand-in: every handler runs on the one pipeline thread, in tell order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, owner: threading.Thread) -> None:
        self._loop = loop
        self._owner = owner
        self._targets: dict[str, Any] = {}
        self._queue: deque[tuple[str, object]] = deque()
        self._draining = False
        self.messages = 0
        self.handler_errors = 0

    @property
    def broken(self) -> dict[str, str]:
        return {}

    def register(self, role: str, target: Any) -> None:
        self._targets[role] = target

    def tell(self, role: str, message: object) -> None:
        if threading.current_thread() is not self._owner:
            self._loop.call_soon_threadsafe(self.tell, role, message)
            return
        self._queue.append((role, message))
        if self._draining:
            return
        self._draining = True
        queue = self._queue
        targets = self._targets
        try:
            while queue:
                target_role, msg = queue.popleft()
                self.messages += 1
                try:
                    targets[target_role].on_receive(msg)
                except Exception:  # the baseline has no crash recovery: count and go on
                    self.handler_errors += 1
                    logger.exception("%s handler failed on %s", target_role, type(msg).__name__)
        finally:
            self._draining = False

    def restart_after_crash(self, actor: Any, error: BaseException) -> None:
        return None

    def stop_all(self, timeout: float = 5.0) -> None:
        return None


class DirectRuntime(Runtime):
    """``Runtime`` with the same role handlers run synchronously on one pipeline thread.

    Only the way roles are built differs: the host API, the role table and
    shutdown are ``Runtime``'s own. The StreamReader is the real one too; its
    state is pointed at the pipeline thread's loop, so streams are pumped by
    the same code on that thread.
    """

    def __init__(
        self,
        routes: Sequence[ModelRoute],
        registry: ToolRegistry,
        config: RuntimeConfig | None = None,
    ) -> None:
        self.loop = new_stream_loop((config or RuntimeConfig()).event_loop)
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.call_soon(ready.set)
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, name="direct-pipeline", daemon=True)
        self.thread.start()
        ready.wait(10)
        super().__init__(routes, registry, config)

    def _make_directory(self) -> Any:
        return SyncDirectory(self.loop, self.thread)

    def _start_roles(self) -> None:
        d: Any = self.directory
        self.reader_state.loop = self.loop
        self.reader_state.thread = self.thread
        self.executor_state.pool = _SyncPool()  # type: ignore[assignment]
        for role, (cls, args, options) in self.role_specs().items():
            actor = cls(d, *args, **options)  # never started: no thread, no inbox
            actor._actor_ref = _SyncRef(d, role)  # type: ignore[assignment]
            d.register(role, actor)


# --- provider events without a network ---------------------------------------------------


PLACEHOLDER = b"BENCHIDPLACEHOLDER"
EventBytes = tuple[bytes, bool]  # (one SSE event, carries a tool-call id placeholder)


def _encode_turn(
    kind: Literal["anthropic", "openai"], with_tools: bool, seed: int
) -> list[EventBytes]:
    """One turn of the loopback server's generator, as the SSE bytes it would put on the wire."""
    import random

    rng = random.Random(seed)
    generator = sse_server.anthropic_turn if kind == "anthropic" else sse_server.openai_turn
    out: list[EventBytes] = []
    for name, data in generator(with_tools, rng):
        data["_sent"] = time.time()
        tagged = False
        block = data.get("content_block")
        if isinstance(block, dict) and block.get("type") == "tool_use":
            block["id"] = str(block["id"]).rsplit("_", 1)[0] + "_" + PLACEHOLDER.decode()
            tagged = True
        choices = data.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            for call in choice.get("delta", {}).get("tool_calls", []) or []:
                if call.get("id"):
                    call["id"] = str(call["id"]).rsplit("_", 1)[0] + "_" + PLACEHOLDER.decode()
                    tagged = True
        payload = (
            (f"event: {name}\n" if name else "").encode() + b"data: " + orjson.dumps(data) + b"\n\n"
        )
        out.append((payload, tagged))
    if kind == "openai":
        out.append((b"data: [DONE]\n\n", False))
    return out


class InProcessProvider:
    """A ``Provider`` that replays the loopback server's turns from memory, unpaced.

    Turns are generated once up front so generating them is not measured.
    Each use stamps the tool-call ids with ``<n>_<time.time_ns()>`` (the same
    shape as the server's), so the latency meter still works and ids never
    repeat within a session. Per event it runs exactly what ``pump_sse``
    runs: ``SseDecoder.feed`` then the adapter's ``feed``.
    """

    def __init__(
        self, kind: Literal["anthropic", "openai"], corpus: int = 64, seed: int = 11
    ) -> None:
        self.kind = kind
        self.name = f"inproc-{kind}"
        self.events = 0
        self._serial = 0
        self._tool_turns = [_encode_turn(kind, True, seed + i) for i in range(corpus)]
        self._answer_turns = [_encode_turn(kind, False, seed + 10_000 + i) for i in range(corpus)]

    def _wants_tools(self, request: ModelRequest) -> bool:
        if self.kind == "anthropic":
            body = build_messages_params(request)
        else:
            body = build_chat_params(request, max_tokens_field="max_tokens")
        return sse_server._wants_tools(body)

    async def aclose(self) -> None:
        return None

    async def stream(self, request: ModelRequest) -> AsyncIterator[GenerateContentResponse]:
        with_tools = self._wants_tools(request)
        self._serial += 1
        turns = self._tool_turns if with_tools else self._answer_turns
        events = turns[self._serial % len(turns)]
        decoder = SseDecoder()
        adapter: Any = (
            AnthropicStreamAdapter()
            if self.kind == "anthropic"
            else OpenAIStreamAdapter(t.name for t in request.tools)
        )
        decode = decoder.feed
        feed = adapter.feed
        for raw, tagged in events:
            if tagged:
                raw = raw.replace(PLACEHOLDER, b"%d_%d" % (self._serial, time.time_ns()))
            self.events += 1
            for event, data in decode(raw):
                for chunk in feed(event, data):
                    yield chunk
        for event, data in decoder.end():
            for chunk in feed(event, data):
                yield chunk
        for chunk in adapter.end():
            yield chunk
