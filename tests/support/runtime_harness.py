"""Drive the real runtime (real actors, real SDKs, loopback provider) from tests.

``RecordingSink`` is the client side of a session as the runtime sees it: it
keeps every frame in arrival order, plus a marker when the turn result is
delivered, so tests can assert ordering across the whole lifecycle.
``check_cards`` holds the invariants every scenario must keep.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.acp_schema import validate_update
from tests.support.eventually import eventually
from toolprep.messages.content import TextPart
from toolprep.messages.turns import TurnResult
from toolprep.runtime.hosting.runtime import Runtime, RuntimeConfig
from toolprep.runtime.kernel.event_loops import EventLoopChoice
from toolprep.runtime.kernel.retry import RetryPolicy
from toolprep.runtime.mcp.config import McpConfig
from toolprep.runtime.providers.factory import DEFAULT_TIMEOUT, build_provider
from toolprep.runtime.providers.routes import ModelRoute
from toolprep.runtime.store import SessionStore
from toolprep.runtime.tools.base import ToolContext, ToolError, ToolKind, ToolOutput
from toolprep.runtime.tools.registry import ToolRegistry, default_registry
from toolprep.testing import FakeProviderServer

TURN_END = {"sessionUpdate": "__turn_result__"}


class RecordingSink:
    def __init__(self, fail_when: Callable[[dict[str, Any]], bool] | None = None) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.fail_when = fail_when
        self.permission_answer = "allow_once"
        self.permission_requests: list[dict[str, Any]] = []
        self.permission_futures: list[Future[str]] = []
        self.auto_answer = True
        self.changed = threading.Condition(self.lock)

    def send_update(self, session_id: str, update: dict[str, Any]) -> None:
        if self.fail_when is not None and self.fail_when(update):
            raise BrokenPipeError("client went away")
        with self.lock:
            self.events.append((session_id, update))
            self.changed.notify_all()

    def send_updates(self, frames: Sequence[tuple[str, dict[str, Any]]]) -> None:
        """Each frame as ``send_update`` takes it, on past one that fails (like a client
        whose frames are written one at a time); then the first failure is raised."""
        failure: Exception | None = None
        for session_id, update in frames:
            try:
                self.send_update(session_id, update)
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    def request_permission(
        self, session_id: str, tool_call: dict[str, Any], request: Any
    ) -> Future[str]:
        answer: Future[str] = Future()
        with self.lock:
            self.permission_requests.append(tool_call)
            self.permission_futures.append(answer)
            self.changed.notify_all()
        if self.auto_answer:
            answer.set_result(self.permission_answer)
        return answer

    def mark_turn_end(self, session_id: str) -> None:
        with self.lock:
            self.events.append((session_id, TURN_END))
            self.changed.notify_all()

    def frames(self, session_id: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [u for s, u in self.events if session_id is None or s == session_id]

    def wait_for(
        self, predicate: Callable[[list[dict[str, Any]]], bool], timeout: float = 30.0
    ) -> None:
        def holds() -> bool:
            with self.lock:
                return predicate([u for _, u in self.events])

        try:
            eventually(holds, timeout=timeout)
        except AssertionError as failure:
            raise AssertionError(f"timed out waiting; frames: {self.frames()}") from failure

    def wait_for_preparing(self, timeout: float = 30.0) -> None:
        self.wait_for(lambda fs: any(is_preparing(f) for f in fs), timeout)


def is_preparing(update: Mapping[str, Any]) -> bool:
    meta = update.get("_meta") or {}
    return meta.get("phase") == "preparing" and not meta.get("preparationDiscarded")


def is_discarded(update: Mapping[str, Any]) -> bool:
    return bool((update.get("_meta") or {}).get("preparationDiscarded"))


def unnumbered(update: Mapping[str, Any]) -> dict[str, Any]:
    """``update`` without its number in the session's log (``_meta.toolprep.seq``), for
    comparing a frame's content; ``_meta`` goes too when nothing else is in it."""
    plain = dict(update)
    meta = {k: v for k, v in (plain.pop("_meta", None) or {}).items() if k != "toolprep"}
    if meta:
        plain["_meta"] = meta
    return plain


def tool_frames(frames: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [f for f in frames if f.get("sessionUpdate") in ("tool_call", "tool_call_update")]


def message_text(frames: Sequence[Mapping[str, Any]]) -> str:
    """The agent's message as the editor shows it: every text chunk, joined."""
    return "".join(
        f["content"]["text"] for f in frames if f.get("sessionUpdate") == "agent_message_chunk"
    )


def lifecycle(frames: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """toolCallId -> ["preparing", "in_progress", "completed" | "failed" | "discarded", ...]."""
    out: dict[str, list[str]] = {}
    for f in tool_frames(frames):
        if is_preparing(f):
            label = "preparing"
        elif is_discarded(f):
            label = "discarded"
        else:
            label = str(f.get("status"))
        out.setdefault(str(f["toolCallId"]), []).append(label)
    return out


def check_cards(frames: Sequence[Mapping[str, Any]]) -> None:
    """The invariants of every turn, whatever happened in it.

    Every frame validates against the ACP schema; a card opens with one
    ``tool_call``; preparing frames carry no arguments; nothing follows a
    card's terminal update; and at each turn result every card opened so far
    is already terminal.
    """
    terminal_seen: set[str] = set()
    opened: set[str] = set()
    for f in frames:
        if f.get("sessionUpdate") == "__turn_result__":
            missing = opened - terminal_seen
            assert not missing, f"turn result written before terminal updates of {sorted(missing)}"
            continue
        validate_update(dict(f))
        if f.get("sessionUpdate") not in ("tool_call", "tool_call_update"):
            continue
        call_id = str(f["toolCallId"])
        assert call_id not in terminal_seen, f"frame after the terminal update of {call_id}: {f}"
        if f["sessionUpdate"] == "tool_call":
            assert call_id not in opened, f"second tool_call for {call_id}"
            opened.add(call_id)
        else:
            assert call_id in opened, f"update for a card never opened: {f}"
        if is_preparing(f):
            assert f["rawInput"] == {} and f["content"] == [], (
                f"arguments leaked into preparing: {f}"
            )
        if f.get("status") in ("completed", "failed"):
            terminal_seen.add(call_id)
    missing = opened - terminal_seen
    assert not missing, f"cards left without a terminal update: {sorted(missing)}"


@dataclass
class RecordingTool:
    """A real tool the scenarios call; it remembers every execution."""

    name: str = "get_weather"
    description: str = "Weather for a city"
    parameters: dict[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {"city": {"type": "string"}}}
    )
    kind: ToolKind = "fetch"
    behaviour: str = "ok"  # ok | raise | hang
    executed: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def title(self, args: Mapping[str, Any]) -> str:
        return f"Weather in {args.get('city', '?')}"

    def locations(self, args: Mapping[str, Any], cwd: Path) -> list[dict[str, Any]]:
        return []

    def needs_permission(self, args: Mapping[str, Any]) -> bool:
        return False

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        with self.lock:
            self.executed.append((ctx.tool_call_id, dict(args)))
        if self.behaviour == "raise":
            raise RuntimeError("weather service exploded")
        if self.behaviour == "tool_error":
            raise ToolError("city not found")
        if self.behaviour == "hang":
            ctx.cancelled.wait(30)
            raise ToolError("stopped")
        return ToolOutput(llm_output=f"Sunny in {args.get('city')}", raw_output={"temp": 21})

    @property
    def executed_ids(self) -> list[str]:
        with self.lock:
            return [i for i, _ in self.executed]


def provider_base_url(kind: str, server: FakeProviderServer) -> str:
    return server.base_url if kind == "anthropic" else server.base_url + "/v1"


@dataclass
class Harness:
    kind: str
    server: FakeProviderServer
    runtime: Runtime
    tool: RecordingTool
    cwd: Path

    def session(self, sink: RecordingSink | None = None) -> tuple[str, RecordingSink]:
        sink = sink or RecordingSink()
        return self.runtime.open_session(self.cwd, sink), sink

    def prompt(
        self, session_id: str, sink: RecordingSink, text: str = "hello"
    ) -> Future[TurnResult]:
        reply = self.runtime.prompt(session_id, [TextPart(text)])
        reply.add_done_callback(lambda _f: sink.mark_turn_end(session_id))
        return reply

    def turn(
        self, session_id: str, sink: RecordingSink, text: str = "hello", timeout: float = 20
    ) -> TurnResult:
        return self.prompt(session_id, sink, text).result(timeout=timeout)


TRUSTING_ECHO = McpConfig(trusted_servers=frozenset({"echo"}))
"""The harness's MCP limits: the defaults, with the suite's ``echo`` server trusted (as
``--trust-mcp-server echo`` would), so its read-only tools run without a client to ask.
What an untrusted server's hint earns is tested through the real agent."""


@contextmanager
def harness(
    kind: str,
    tmp_path: Path,
    *,
    models: Sequence[str] = ("model-a",),
    max_retries: int = 2,
    tool_timeout: float = 10.0,
    registry: ToolRegistry | None = None,
    retry: RetryPolicy | None = None,
    provider_timeout: float | None = None,
    store: SessionStore | None = None,
    server: FakeProviderServer | None = None,
    event_loop: EventLoopChoice = "asyncio",
) -> Iterator[Harness]:
    """A runtime on the loopback fake provider (``server``, or a new one).

    Its streams run on asyncio's loop unless ``event_loop`` says otherwise: that
    is what an install without the uvloop extra runs (the CLI tests run the
    default, ``auto``, which picks uvloop where the extra is installed).
    """
    with contextlib.ExitStack() as stack:
        if server is None:
            server = stack.enter_context(FakeProviderServer())
        provider = build_provider(
            kind,
            base_url=provider_base_url(kind, server),
            api_key="test-key",
            max_retries=0,
            timeout=DEFAULT_TIMEOUT if provider_timeout is None else provider_timeout,
        )
        tool = RecordingTool()
        reg = registry or default_registry()
        reg.register(tool, replace=True)
        config = RuntimeConfig(
            retry=retry
            or RetryPolicy(max_retries=max_retries, base_delay=0.01, jitter=0.0, max_delay=0.05),
            tool_timeout=tool_timeout,
            event_loop=event_loop,
        )
        runtime = Runtime(
            [ModelRoute(provider, m) for m in models], reg, config, store=store, mcp=TRUSTING_ECHO
        )
        try:
            yield Harness(kind, server, runtime, tool, tmp_path)
        finally:
            runtime.shutdown(timeout=5)
