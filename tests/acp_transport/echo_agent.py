"""A tiny agent served by ``JsonRpcConnection`` on its own stdin/stdout.

The subprocess tests launch it the way an editor launches toolprep, so the
transport is exercised over real stdio pipes, a real process boundary and a
real EOF, not just in-process pipes. Methods:

* ``echo`` answers its params; ``fail`` raises ``RpcError(code, message)``;
  ``crash`` raises ``ValueError``; ``need_session`` validates ``sessionId``.
* ``noisy`` prints to stdout, which must end up on stderr, not the protocol.
* ``session/prompt`` returns a future, sends one ``session/update`` and
  finishes only when ``session/cancel`` arrives for the same session.
* ``ask_client`` calls the client's ``client/answer`` and relays the outcome;
  ``_read_via_client`` (an ACP extension method) does the same with the
  client's ``fs/read_text_file``.
* ``initialize`` and ``session/new`` answer just enough for the official ACP
  SDK client to talk to it.

On EOF it writes ``on_close called`` to stderr and exits 0.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from toolprep.runtime.acp.errors import ConnectionClosed, RpcError, require
from toolprep.runtime.acp.jsonrpc_connection import JsonRpcConnection


class EchoAgent:
    """Handlers for the methods above; state is what a prompt turn needs to be cancelled."""

    def __init__(self, connection: JsonRpcConnection) -> None:
        self.connection = connection
        self.turns: dict[str, Future[Any]] = {}
        self.lock = threading.Lock()
        connection.on_request("echo", self.echo)
        connection.on_request("fail", self.fail)
        connection.on_request("crash", self.crash)
        connection.on_request("need_session", self.need_session)
        connection.on_request("noisy", self.noisy)
        connection.on_request("session/prompt", self.prompt)
        connection.on_request("ask_client", self.ask_client)
        connection.on_request("_read_via_client", self.read_via_client)
        connection.on_request("initialize", self.initialize)
        connection.on_request("session/new", self.new_session)
        connection.on_notification("session/cancel", self.cancel)
        connection.on_close(self.closed)

    def echo(self, params: Any, request_id: Any) -> Any:
        return params

    def fail(self, params: Any, request_id: Any) -> Any:
        raise RpcError(require(params, "code", int), require(params, "message", str))

    def crash(self, params: Any, request_id: Any) -> Any:
        raise ValueError("boom")

    def need_session(self, params: Any, request_id: Any) -> Any:
        return {"sessionId": require(params, "sessionId", str)}

    def noisy(self, params: Any, request_id: Any) -> Any:
        print("this must not reach the protocol stream")
        return {"printed": True}

    def prompt(self, params: Any, request_id: Any) -> Future[Any]:
        session_id = require(params, "sessionId", str)
        turn: Future[Any] = Future()
        with self.lock:
            self.turns[session_id] = turn
        self.connection.notify(
            "session/update",
            {
                "sessionId": session_id,
                "update": {
                    "sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": "working"},
                },
            },
        )
        return turn

    def cancel(self, params: Any) -> None:
        with self.lock:
            turn = self.turns.pop(params.get("sessionId"), None)
        if turn is not None:
            turn.set_result({"stopReason": "cancelled"})

    def initialize(self, params: Any, request_id: Any) -> Any:
        return {
            "protocolVersion": require(params, "protocolVersion", int),
            "agentCapabilities": {},
            "authMethods": [],
        }

    def new_session(self, params: Any, request_id: Any) -> Any:
        return {"sessionId": f"echo-{require(params, 'cwd', str)}"}

    def ask_client(self, params: Any, request_id: Any) -> Future[Any]:
        return self._relay("client/answer", params)

    def read_via_client(self, params: Any, request_id: Any) -> Future[Any]:
        return self._relay("fs/read_text_file", params)

    def _relay(self, method: str, params: Any) -> Future[Any]:
        relayed: Future[Any] = Future()

        def relay(done: Future[Any]) -> None:
            error = done.exception()
            if error is None:
                relayed.set_result({"client said": done.result()})
            else:
                relayed.set_exception(error)

        self.connection.request(method, params).add_done_callback(relay)
        return relayed

    def closed(self) -> None:
        with self.lock:
            turns = list(self.turns.values())
            self.turns.clear()
        for turn in turns:
            turn.set_result({"stopReason": "cancelled"})
        print("on_close called", file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-line-bytes", type=int, default=8 * 1024 * 1024)
    parser.add_argument("--request-workers", type=int, default=0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    protocol_out = sys.stdout.buffer
    sys.stdout = sys.stderr  # stray prints must never corrupt the protocol stream
    connection = JsonRpcConnection(
        sys.stdin.buffer,
        protocol_out,
        max_line_bytes=args.max_line_bytes,
        request_workers=args.request_workers,
        name="echo-agent",
    )
    EchoAgent(connection)
    connection.start()
    connection.wait_closed()
    try:
        connection.notify("goodbye")
    except ConnectionClosed:
        print("goodbye not delivered: ConnectionClosed", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
