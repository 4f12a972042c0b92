"""``toolprep acp`` as a plain subprocess whose output is read with deadlines.

For tests about the process itself (signals, exit, what it leaves running),
which need the ``Popen`` handle and must never block forever on a read: a
reader thread collects every stdout message, and each wait has a deadline.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

import orjson

from tests.support.message_log import Message, MessageLog


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

    def send(self, message: Message) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(orjson.dumps(message) + b"\n")
        self.process.stdin.flush()

    def start_session(self, cwd: Path) -> str:
        self.reply(self.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}}))
        answer = self.reply(self.request("session/new", {"cwd": str(cwd), "mcpServers": []}))
        session_id: str = answer["result"]["sessionId"]
        return session_id

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
