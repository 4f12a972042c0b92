"""An ACP client over WebSocket, for driving ``toolprep serve`` the way a remote editor would.

Like ``AgentProcess`` for stdio: a reader thread validates and collects
every message the daemon sends, and every wait has a deadline.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import orjson
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.support.message_log import Message, MessageLog


class WsClient(MessageLog):
    def __init__(self, url: str, token: str | None = None, *, max_size: int | None = None) -> None:
        super().__init__()
        headers = {"Authorization": f"Bearer {token}"} if token is not None else None
        self.socket: ClientConnection = connect(
            url, additional_headers=headers, max_size=max_size, compression=None, legacy=True
        )
        self.close_code: int | None = None
        self._reader = threading.Thread(target=self._read, name="ws-client", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            for data in self.socket:
                self.record(orjson.loads(data))
        except ConnectionClosed:
            pass
        finally:
            with self._changed:
                self.close_code = self.socket.close_code
                self._changed.notify_all()

    def send(self, message: Message) -> None:
        self.socket.send(orjson.dumps(message), text=True)

    def wait_closed(self, timeout: float = 30.0) -> int | None:
        self._reader.join(timeout)
        assert not self._reader.is_alive(), "the connection is still open"
        return self.close_code

    def result(self, request_id: int, timeout: float = 30.0) -> Any:
        reply = self.reply(request_id, timeout)
        assert "result" in reply, reply
        return reply["result"]

    def requests(self, method: str) -> list[Message]:
        with self._changed:
            return [m for m in self.messages if m.get("method") == method]

    def initialize(self, capabilities: Message | None = None) -> Message:
        params = {"protocolVersion": 1, "clientCapabilities": capabilities or {}}
        result: Message = self.result(self.request("initialize", params))
        return result

    def start_session(self, cwd: Path) -> str:
        self.initialize()
        result = self.result(self.request("session/new", {"cwd": str(cwd), "mcpServers": []}))
        session_id: str = result["sessionId"]
        return session_id

    def load(self, session_id: str, cwd: Path, method: str = "session/load") -> Message:
        params = {"sessionId": session_id, "cwd": str(cwd), "mcpServers": []}
        return self.reply(self.request(method, params))

    def answer_permission(self, request: Message, option: str = "allow_once") -> None:
        outcome = {"outcome": "selected", "optionId": option}
        self.send({"jsonrpc": "2.0", "id": request["id"], "result": {"outcome": outcome}})

    def close(self) -> None:
        self.socket.close()
        self._reader.join(10)
