"""An editor-like ACP client on a command's stdio: what an editor does with its agent command.

``AgentProcess`` (a real process on pipes, every message validated against
the ACP schema, every wait bounded) with the few client steps an editor
takes, the same as ``WsClient``'s, so a test can drive the same session over
stdio (through ``toolprep connect``) and over a direct WebSocket.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tests.support.agent_process import AgentProcess
from tests.support.message_log import Message


def connect_command(*options: str) -> list[str]:
    """``toolprep connect OPTIONS``."""
    return [sys.executable, "-m", "toolprep.runtime.cli", "connect", *options]


class StdioEditor(AgentProcess):
    def send_line(self, line: bytes) -> None:
        """Write ``line`` and a newline as they are, whether or not they are JSON."""
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def result(self, request_id: int, timeout: float = 30.0) -> Any:
        reply = self.reply(request_id, timeout)
        assert "result" in reply, reply
        return reply["result"]

    def requests(self, method: str) -> list[Message]:
        with self._changed:
            return [m for m in self.messages if m.get("method") == method]

    def initialize(self) -> Message:
        params = {"protocolVersion": 1, "clientCapabilities": {}}
        result: Message = self.result(self.request("initialize", params))
        return result

    def load(self, session_id: str, cwd: Path) -> Message:
        params = {"sessionId": session_id, "cwd": str(cwd), "mcpServers": []}
        return self.reply(self.request("session/load", params))

    def answer_permission(self, request: Message, option: str = "allow_once") -> None:
        outcome = {"outcome": "selected", "optionId": option}
        self.send({"jsonrpc": "2.0", "id": request["id"], "result": {"outcome": outcome}})
