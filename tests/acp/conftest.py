"""Spawn ``toolprep acp`` as an editor would, and talk to it over stdio."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
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
from tests.support.processes import alive
from tests.support.runtime_harness import provider_base_url
from toolprep.testing import FakeProviderServer

REPO = Path(__file__).resolve().parents[2]


def agent_command(
    kind: str, server: FakeProviderServer, *extra: str
) -> tuple[list[str], dict[str, str]]:
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


@dataclass
class RecordingClient(RefusingClient):
    """An ACP client: records what the agent sends, answers permission requests."""

    permission: str = "allow_once"  # allow_once | reject_once | wait
    updates: list[dict[str, Any]] = field(default_factory=list)
    raw: list[dict[str, Any]] = field(default_factory=list)
    permission_asked: asyncio.Event = field(default_factory=asyncio.Event)
    permission_release: asyncio.Event = field(default_factory=asyncio.Event)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    buffers: dict[str, str] = field(default_factory=dict)  # path -> unsaved editor text
    written: list[tuple[str, str]] = field(default_factory=list)

    def observe(self, event: StreamEvent) -> None:
        if event.direction is StreamDirection.INCOMING:
            message = dict(event.message)
            validate_agent_message(message)
            self.raw.append(message)
            if message.get("method") == "session/update":
                self.updates.append(message["params"])
            self.changed.set()

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
        async def loop() -> None:
            while not predicate(self.frames()):
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(loop(), timeout)


@pytest.fixture
def pids() -> Iterator[list[int]]:
    """Pids a test started; any still alive at the end are killed so none leak."""
    started: list[int] = []
    yield started
    for pid in started:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


@asynccontextmanager
async def running_agent(
    command: Sequence[str], env: dict[str, str], client: RecordingClient, *, client_fs: bool = False
) -> AsyncIterator[tuple[Any, Any]]:
    async with spawn_agent_process(
        client, command[0], *command[1:], env=env, cwd=REPO, observers=[client.observe]
    ) as (conn, process):
        capabilities = ClientCapabilities(
            fs=FileSystemCapabilities(read_text_file=client_fs, write_text_file=client_fs)
        )
        await conn.initialize(protocol_version=1, client_capabilities=capabilities)
        yield conn, process


class RawAgent:
    """The agent on plain pipes, for input no well-behaved client would send."""

    def __init__(self, command: Sequence[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            list(command),
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def send_raw(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        self.send_raw(orjson.dumps(message) + b"\n")

    def read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, "agent closed stdout"
        message: dict[str, Any] = orjson.loads(line)
        validate_agent_message(message)
        return message

    def read_until_id(self, request_id: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        seen: list[dict[str, Any]] = []
        while True:
            message = self.read()
            if message.get("id") == request_id and "method" not in message:
                return message, seen
            seen.append(message)

    def close(self, timeout: float = 15) -> int:
        """End stdin as an editor would and wait for the exit; output stays readable."""
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.close()
        return self.process.wait(timeout=timeout)

    def dispose(self) -> None:
        """Stop the agent if it still runs and release every pipe."""
        if self.process.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.close()
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            if pipe is not None:
                with contextlib.suppress(BrokenPipeError):
                    pipe.close()
