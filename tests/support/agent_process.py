"""The agent as an editor runs it: ``toolprep acp`` (or ``toolprep connect``) on stdio.

One helper for every test that talks to an agent command over its pipes:

- ``agent_command`` and ``connect_command`` build the command lines;
- ``AgentProcess`` runs one on plain pipes. A reader thread records every
  message (validated against the ACP schema), every wait is bounded, and the
  ``Popen`` handle is there for tests about the process itself (signals, exit,
  what it leaves running). It takes a client's steps (``initialize``,
  ``start_session``, ``prompt``, ``answer_permission``), reads the messages in
  order for a test that checks each one (``read``, ``read_until_id``), and
  writes bytes no well-behaved client sends (``send_raw``);
- ``SharedAgents`` starts them once for the tests of a module that need no
  process of their own;
- ``running_agent`` runs one under the official ACP SDK's client instead, with
  ``RecordingClient`` answering it, for tests of the SDK's view of the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson
from acp.connection import StreamDirection, StreamEvent
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    FileSystemCapabilities,
    PermissionOption,
    ReadTextFileResponse,
    RequestPermissionResponse,
    ToolCallUpdate,
    WriteTextFileResponse,
)
from acp.stdio import spawn_agent_process

from tests.support.acp_client import RefusingClient
from tests.support.acp_schema import validate_agent_message
from tests.support.eventually import eventually, eventually_async
from tests.support.message_log import Message, MessageLog
from tests.support.runtime_harness import provider_base_url
from toolprep.testing import FakeProviderServer

__all__ = [
    "REPO",
    "AgentProcess",
    "RecordingClient",
    "SharedAgents",
    "SharedSdkAgents",
    "agent_command",
    "connect_command",
    "running_agent",
]

REPO = Path(__file__).resolve().parents[2]

AGENT_EXIT_S = 30.0
"""How long an agent run under the SDK's client may take to exit once its stdin closed."""


def agent_command(
    kind: str, server: FakeProviderServer, *extra: str
) -> tuple[list[str], dict[str, str]]:
    """``toolprep acp`` on ``server`` speaking ``kind``'s wire, and an environment with a test
    key for it and no real one."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["ANTHROPIC_API_KEY" if kind == "anthropic" else "OPENAI_API_KEY"] = "test-key"
    command = [
        sys.executable,
        "-m",
        "toolprep.runtime.cli",
        "acp",
        "--provider",
        kind,
        "--base-url",
        provider_base_url(kind, server),
        "--max-retries",
        "2",
        *extra,
    ]
    return command, env


def connect_command(*options: str) -> list[str]:
    """``toolprep connect OPTIONS``."""
    return [sys.executable, "-m", "toolprep.runtime.cli", "connect", *options]


class AgentProcess(MessageLog):
    """The agent on pipes; ``messages`` holds what it wrote, ``stderr()`` what it logged."""

    def __init__(
        self,
        command: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        stderr_file: Path,
        *,
        start_new_session: bool = False,
        pass_fds: Sequence[int] = (),
    ) -> None:
        """``start_new_session`` and ``pass_fds`` as editors may launch an agent: in a
        process group of its own, handed descriptors beyond 0 to 2."""
        self._stderr_path = stderr_file
        super().__init__()
        self._read_upto = 0  # how many of ``messages`` ``read`` has handed out
        self._stderr: IO[bytes] = stderr_file.open("wb")
        self.process = subprocess.Popen(
            list(command),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            start_new_session=start_new_session,
            pass_fds=tuple(pass_fds),
        )
        self._reader = threading.Thread(target=self._read, name="agent-stdout", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.record(orjson.loads(line))

    # --- writing ------------------------------------------------------------------

    def send(self, message: Message) -> None:
        self.send_raw(orjson.dumps(message))

    def send_raw(self, line: bytes) -> None:
        """Write ``line`` and a newline as they are, whether or not they are JSON."""
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    send_line = send_raw

    # --- a client's steps ---------------------------------------------------------

    def result(self, request_id: int, timeout: float = 30.0) -> Any:
        reply = self.reply(request_id, timeout)
        assert "result" in reply, reply
        return reply["result"]

    def requests(self, method: str) -> list[Message]:
        """The agent's requests of ``method`` so far."""
        with self._changed:
            return [m for m in self.messages if m.get("method") == method]

    def initialize(self) -> Message:
        params = {"protocolVersion": 1, "clientCapabilities": {}}
        result: Message = self.result(self.request("initialize", params))
        return result

    def start_session(self, cwd: Path) -> str:
        """Initialize, then open a session in ``cwd``: its id."""
        self.reply(self.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}}))
        return self.new_session(cwd)

    def new_session(self, cwd: Path) -> str:
        """Open a session in ``cwd`` on the initialized agent: its id."""
        answer = self.reply(self.request("session/new", {"cwd": str(cwd), "mcpServers": []}))
        session_id: str = answer["result"]["sessionId"]
        return session_id

    def load(self, session_id: str, cwd: Path) -> Message:
        params = {"sessionId": session_id, "cwd": str(cwd), "mcpServers": []}
        return self.reply(self.request("session/load", params))

    def answer_permission(self, request: Message, option: str = "allow_once") -> None:
        outcome = {"outcome": "selected", "optionId": option}
        self.send({"jsonrpc": "2.0", "id": request["id"], "result": {"outcome": outcome}})

    # --- reading in order ---------------------------------------------------------

    def read(self, timeout: float = 30.0) -> Message:
        """The next message ``read`` has not handed out yet, once the agent wrote it."""

        def written() -> bool:
            with self._changed:
                return len(self.messages) > self._read_upto

        eventually(written, timeout=timeout, what="the agent's next message")
        with self._changed:
            message = self.messages[self._read_upto]
        self._read_upto += 1
        return message

    def read_until_id(
        self, request_id: Any, timeout: float = 30.0
    ) -> tuple[Message, list[Message]]:
        """The response to ``request_id`` (None: to a request without a usable id), and the
        messages ``read`` passed over on the way to it."""
        seen: list[Message] = []
        while True:
            message = self.read(timeout)
            if message.get("id") == request_id and "method" not in message:
                return message, seen
            seen.append(message)

    def unread(self) -> list[Message]:
        """The messages ``read`` has not handed out yet, handed out now."""
        with self._changed:
            rest = self.messages[self._read_upto :]
            self._read_upto = len(self.messages)
        return rest

    def forget(self) -> None:
        """Drop every message recorded so far: what a test sharing this agent reads (``messages``,
        ``updates()``, ``read``) starts with its own requests."""
        with self._changed:
            self.messages.clear()
            self._read_upto = 0

    def skip_read(self) -> None:
        """Pass over everything written so far: ``read`` starts at the next message (a test
        sharing this agent ignores what earlier tests left unread)."""
        with self._changed:
            self._read_upto = len(self.messages)

    # --- ending -------------------------------------------------------------------

    def close_input(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()

    def wait_exit(self, timeout: float = 60.0) -> int:
        code = self.process.wait(timeout=timeout)
        self._reader.join(timeout)
        return code

    def close(self, timeout: float = 15.0) -> int:
        """End stdin as an editor would and wait for the exit; every message is recorded."""
        with contextlib.suppress(BrokenPipeError):
            self.close_input()
        return self.wait_exit(timeout)

    def stderr(self) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return self._stderr_path.read_text(errors="replace")

    def kill(self) -> None:
        """Last-resort cleanup for a test that failed with the agent still running."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        self._reader.join(10)  # stdout reached EOF with the exit: the reader is done with it
        if self.process.stdout is not None and not self._reader.is_alive():
            self.process.stdout.close()
        self._stderr.close()

    def dispose(self) -> None:
        """Stop the agent as an editor would (stdin closed), by force if it will not, and
        release every pipe."""
        if self.process.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.close()
        self.kill()


class SharedAgents:
    """Agents a module's tests share: one per wire and command-line options, each on a loopback
    provider of its own, started when a test first asks for it and stopped with the module.

    For tests that only open sessions of their own and talk to them: starting an interpreter
    per test is most of such a test's time. A test that ends the agent, signals it, or
    depends on what it did before (a crash, a restart, an option) starts its own instead.
    ``agent`` hands out the running agent with its record and its provider's script and
    requests cleared, so a test sees only its own requests' work.
    """

    def __init__(self, workdir: Path) -> None:
        self._workdir = workdir
        self._started: dict[tuple[str, ...], tuple[AgentProcess, FakeProviderServer]] = {}

    def agent(self, kind: str, *options: str) -> tuple[AgentProcess, FakeProviderServer]:
        """The shared agent on ``kind``'s wire with ``options``, initialized, ready for a test."""
        key = (kind, *options)
        if key not in self._started:
            server = FakeProviderServer().start()
            command, env = agent_command(kind, server, *options)
            log = self._workdir / f"stderr-{len(self._started)}.log"
            try:
                agent = AgentProcess(command, env, self._workdir, log)
            except BaseException:
                server.stop()
                raise
            self._started[key] = (agent, server)
            agent.initialize()
        agent, server = self._started[key]
        assert agent.process.poll() is None, f"a shared agent exited: {agent.stderr()}"
        server.reset()
        agent.forget()
        return agent, server

    def close(self) -> None:
        """Stop every agent as an editor would, then its provider."""
        for agent, server in self._started.values():
            agent.dispose()
            server.stop()
        self._started.clear()


@dataclass
class RecordingClient(RefusingClient):
    """An ACP client: records what the agent sends, answers permission requests."""

    permission: str = "allow_once"  # allow_once | reject_once | wait
    updates: list[dict[str, Any]] = field(default_factory=list)
    raw: list[dict[str, Any]] = field(default_factory=list)
    permission_asked: asyncio.Event = field(default_factory=asyncio.Event)
    permission_release: asyncio.Event = field(default_factory=asyncio.Event)
    buffers: dict[str, str] = field(default_factory=dict)  # path -> unsaved editor text
    written: list[tuple[str, str]] = field(default_factory=list)

    def observe(self, event: StreamEvent) -> None:
        if event.direction is StreamDirection.INCOMING:
            message = dict(event.message)
            validate_agent_message(message)
            self.raw.append(message)
            if message.get("method") == "session/update":
                self.updates.append(message["params"])

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        self.permission_asked.set()
        if self.permission == "wait":
            await self.permission_release.wait()
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=self.permission)
        )

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        return None

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> ReadTextFileResponse:
        text = self.buffers.get(path)
        if text is None:
            text = Path(path).read_text()
        return ReadTextFileResponse(content=text)

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse:
        self.written.append((path, content))
        Path(path).write_text(content)
        return WriteTextFileResponse()

    def frames(self, session_id: str | None = None) -> list[dict[str, Any]]:
        return [
            p["update"] for p in self.updates if session_id is None or p["sessionId"] == session_id
        ]

    async def wait_for(self, predicate: Any, timeout: float = 30.0) -> None:
        """Until ``predicate`` holds of the updates so far (the connection reads meanwhile)."""
        await eventually_async(lambda: bool(predicate(self.frames())), timeout=timeout)


@asynccontextmanager
async def running_agent(
    command: Sequence[str], env: dict[str, str], client: RecordingClient, *, client_fs: bool = False
) -> AsyncIterator[tuple[Any, Any]]:
    """The agent under the ACP SDK's client, initialized; the connection and the process."""
    async with _spawned(command, env, client, client.observe, client_fs=client_fs) as running:
        yield running


class _RoutingClient(RefusingClient):
    """The SDK client of an agent several tests share, one after the other: what the agent
    sends about the current test's sessions goes to that test's ``RecordingClient``; what it
    still sends about an earlier test's sessions goes nowhere."""

    def __init__(self) -> None:
        self.current: RecordingClient | None = None
        self._seen: set[str] = set()  # session ids the agent spoke of
        self._earlier: set[str] = set()  # those of the tests before the current one

    def hand_to(self, client: RecordingClient) -> None:
        self._earlier |= self._seen
        self.current = client

    def _for(self, session_id: str) -> RecordingClient | None:
        self._seen.add(session_id)
        return None if session_id in self._earlier else self.current

    def observe(self, event: StreamEvent) -> None:
        message = event.message
        params, result = message.get("params"), message.get("result")
        session_id = None
        if isinstance(params, dict):
            session_id = params.get("sessionId")
        if session_id is None and isinstance(result, dict):
            session_id = result.get("sessionId")
        client = self._for(session_id) if isinstance(session_id, str) else self.current
        if client is not None:
            client.observe(event)

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        client = self._for(session_id)
        if client is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return await client.request_permission(session_id, tool_call, options, **kwargs)

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> ReadTextFileResponse:
        client = self._for(session_id)
        if client is None:
            return await super().read_text_file(session_id, path, line, limit, **kwargs)
        return await client.read_text_file(session_id, path, line, limit, **kwargs)

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse | None:
        client = self._for(session_id)
        if client is None:
            return await super().write_text_file(session_id, path, content, **kwargs)
        return await client.write_text_file(session_id, path, content, **kwargs)


class SharedSdkAgents:
    """``SharedAgents`` for tests that talk through the ACP SDK (``running_agent``): one agent
    per wire, options and client file-system capability, started on the module's event loop
    when a test first asks for it (``pytest.mark.asyncio(loop_scope="module")``)."""

    def __init__(self) -> None:
        self._stack = contextlib.AsyncExitStack()
        self._started: dict[tuple[object, ...], tuple[Any, Any, FakeProviderServer]] = {}
        self._routers: dict[tuple[object, ...], _RoutingClient] = {}

    async def agent(
        self, kind: str, client: RecordingClient, *options: str, client_fs: bool = False
    ) -> tuple[Any, FakeProviderServer]:
        """The connection to the shared agent, which now answers through ``client``, and its
        provider, its script and requests cleared."""
        key = (kind, client_fs, *options)
        if key not in self._started:
            server = self._stack.enter_context(FakeProviderServer())
            router = _RoutingClient()
            command, env = agent_command(kind, server, *options)
            conn, process = await self._stack.enter_async_context(
                _spawned(command, env, router, router.observe, client_fs=client_fs)
            )
            self._started[key] = (conn, process, server)
            self._routers[key] = router
        conn, process, server = self._started[key]
        assert process.returncode is None, "a shared agent exited"
        server.reset()
        self._routers[key].hand_to(client)
        return conn, server

    async def aclose(self) -> None:
        await self._stack.aclose()
        self._started.clear()


@asynccontextmanager
async def _spawned(
    command: Sequence[str],
    env: dict[str, str],
    client: RefusingClient,
    observe: Callable[[StreamEvent], None],
    *,
    client_fs: bool,
) -> AsyncIterator[tuple[Any, Any]]:
    async with spawn_agent_process(
        client,
        command[0],
        *command[1:],
        env=env,
        cwd=REPO,
        observers=[observe],
        # The SDK kills an agent that has not exited 2 s after its stdin closed (and may
        # then race the exit it waited for); a busy machine's agent gets as long as an
        # editor would give it.
        transport_kwargs={"shutdown_timeout": AGENT_EXIT_S},
    ) as (conn, process):
        capabilities = ClientCapabilities(
            fs=FileSystemCapabilities(read_text_file=client_fs, write_text_file=client_fs)
        )
        await conn.initialize(protocol_version=1, client_capabilities=capabilities)
        yield conn, process
