"""An ACP client over WebSocket, for driving ``toolprep serve`` the way a remote editor would.

Like ``AgentProcess`` for stdio: a reader thread validates and collects
every message the daemon sends, and every wait has a deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.support.acp_schema import validate_agent_message

Message = dict[str, Any]


class WsClient:
    def __init__(self, url: str, token: str | None = None, *, max_size: int | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else None
        self.socket: ClientConnection = connect(
            url, additional_headers=headers, max_size=max_size, compression=None, legacy=True
        )
        self.messages: list[Message] = []
        self.close_code: int | None = None
        self._changed = threading.Condition()
        self._next_id = 0
        self._reader = threading.Thread(target=self._read, name="ws-client", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            for data in self.socket:
                message: Message = orjson.loads(data)
                validate_agent_message(message)
                with self._changed:
                    self.messages.append(message)
                    self._changed.notify_all()
        except ConnectionClosed:
            pass
        finally:
            with self._changed:
                self.close_code = self.socket.close_code
                self._changed.notify_all()

    def send(self, message: Message) -> None:
        self.socket.send(orjson.dumps(message), text=True)

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
                    raise AssertionError(f"timed out; the daemon sent {self.messages!r}")
                self._changed.wait(remaining)

    def wait_closed(self, timeout: float = 30.0) -> int | None:
        self._reader.join(timeout)
        assert not self._reader.is_alive(), "the connection is still open"
        return self.close_code

    def reply(self, request_id: int, timeout: float = 30.0) -> Message:
        self.wait_for(lambda ms: any(_answers(m, request_id) for m in ms), timeout)
        return next(m for m in self.messages if _answers(m, request_id))

    def result(self, request_id: int, timeout: float = 30.0) -> Any:
        reply = self.reply(request_id, timeout)
        assert "result" in reply, reply
        return reply["result"]

    def requests(self, method: str) -> list[Message]:
        with self._changed:
            return [m for m in self.messages if m.get("method") == method]

    def updates(self, session_id: str | None = None) -> list[Message]:
        """The ``session/update`` payloads so far (of one session, if named), in order."""
        with self._changed:
            return [
                m["params"]["update"]
                for m in self.messages
                if m.get("method") == "session/update"
                and session_id in (None, m["params"]["sessionId"])
            ]

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

    def prompt(self, session_id: str, text: str = "go") -> int:
        return self.request(
            "session/prompt",
            {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]},
        )

    def answer_permission(self, request: Message, option: str = "allow_once") -> None:
        outcome = {"outcome": "selected", "optionId": option}
        self.send({"jsonrpc": "2.0", "id": request["id"], "result": {"outcome": outcome}})

    def close(self) -> None:
        self.socket.close()
        self._reader.join(10)


def _answers(message: Message, request_id: int) -> bool:
    return message.get("id") == request_id and "method" not in message
