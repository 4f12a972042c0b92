"""``toolprep acp`` as a plain subprocess whose output is read with deadlines.

For tests about the process itself (signals, exit, what it leaves running),
which need the ``Popen`` handle and must never block forever on a read: a
reader thread collects every stdout message, and each wait has a deadline.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import orjson

from tests.support.acp_schema import validate_agent_message

Message = dict[str, Any]


class AgentProcess:
    """The agent on pipes; ``messages`` holds what it wrote, ``stderr()`` what it logged."""

    def __init__(
        self, command: Sequence[str], env: Mapping[str, str], cwd: Path, stderr_file: Path
    ) -> None:
        self._stderr_path = stderr_file
        self._stderr: IO[bytes] = stderr_file.open("wb")
        self.process = subprocess.Popen(
            list(command),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        self.messages: list[Message] = []
        self._changed = threading.Condition()
        self._next_id = 0
        self._reader = threading.Thread(target=self._read, name="agent-stdout", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            message: Message = orjson.loads(line)
            validate_agent_message(message)
            with self._changed:
                self.messages.append(message)
                self._changed.notify_all()

    def send(self, message: Message) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(orjson.dumps(message) + b"\n")
        self.process.stdin.flush()

    def request(self, method: str, params: Message) -> int:
        self._next_id += 1
        self.send({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        return self._next_id

    def wait_for(self, predicate: Callable[[list[Message]], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self.messages):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"timed out; the agent wrote {self.messages!r}")
                self._changed.wait(remaining)

    def reply(self, request_id: int, timeout: float = 30.0) -> Message:
        self.wait_for(lambda ms: any(_answers(m, request_id) for m in ms), timeout)
        return next(m for m in self.messages if _answers(m, request_id))

    def updates(self, session_id: str | None = None) -> list[Message]:
        """The ``session/update`` payloads so far (of one session, if named), in order."""
        with self._changed:
            return [
                m["params"]["update"]
                for m in self.messages
                if m.get("method") == "session/update"
                and session_id in (None, m["params"]["sessionId"])
            ]

    def start_session(self, cwd: Path) -> str:
        self.reply(self.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}}))
        answer = self.reply(self.request("session/new", {"cwd": str(cwd), "mcpServers": []}))
        session_id: str = answer["result"]["sessionId"]
        return session_id

    def prompt(self, session_id: str, text: str = "go") -> int:
        return self.request(
            "session/prompt",
            {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]},
        )

    def close_input(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()

    def wait_exit(self, timeout: float = 60.0) -> int:
        code = self.process.wait(timeout=timeout)
        self._reader.join(timeout)
        return code

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


def _answers(message: Message, request_id: int) -> bool:
    return message.get("id") == request_id and "method" not in message
