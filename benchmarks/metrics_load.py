"""Sessions prompting in a loop over WebSocket connections, a share of their turns cancelled.

The load behind ``benchmarks.metrics_plot``: each session starts its next turn when the last
one is answered, and a seeded share of turns is cancelled as soon as the turn's first tool
card shows, so the daemon discards cards (reason ``cancel``) as it would for an editor
whose user pressed stop. Sessions can be added while the load runs, so the metrics move.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from websockets.exceptions import ConnectionClosed

from benchmarks.serve.ws_client import CALL_TIMEOUT_S, Line, WsLoadClient

__all__ = ["CancellingLoad", "LoadCounts"]


@dataclass
class _Session:
    client: WsLoadClient
    cancel_this_turn: bool = False
    cancel_sent: bool = False


@dataclass
class LoadCounts:
    """What the clients saw: turns answered by stop reason, cancels sent, failed prompts."""

    stop_reasons: dict[str, int] = field(default_factory=dict)
    cancels_sent: int = 0
    prompt_errors: int = 0


class CancellingLoad:
    """Looping sessions spread over ``clients`` (each built with ``on_update`` as its handler).

    ``cancel_share`` of the turns (drawn from ``seed``) are cancelled at their first tool card.
    """

    def __init__(self, workdir: str, cancel_share: float, seed: int = 11) -> None:
        self.workdir = workdir
        self.cancel_share = cancel_share
        self.counts = LoadCounts()
        self._rng = random.Random(seed)
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        self._in_flight = 0
        self._running = threading.Event()
        self._running.set()

    def on_update(self, session_id: str, update: dict[str, Any], _read_ns: int) -> None:
        """A client's ``session/update`` handler: cancel a marked turn at its first card."""
        if update.get("sessionUpdate") != "tool_call":
            return
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None or not session.cancel_this_turn or session.cancel_sent:
                return
            session.cancel_sent = True
            self.counts.cancels_sent += 1
        notification = {
            "jsonrpc": "2.0",
            "method": "session/cancel",
            "params": {"sessionId": session_id},
        }
        # Gone: the prompt's answer (a local error) ends the loop.
        with contextlib.suppress(ConnectionClosed):
            session.client.socket.send(orjson.dumps(notification), text=True)

    def add_sessions(self, clients: list[WsLoadClient], count: int) -> None:
        """Open ``count`` sessions round-robin over ``clients`` and start their loops."""
        for n in range(count):
            client = clients[n % len(clients)]
            answer = client.call(
                "session/new", {"cwd": self.workdir, "mcpServers": []}, CALL_TIMEOUT_S
            )
            session_id: str = answer["result"]["sessionId"]
            with self._lock:
                self._sessions[session_id] = _Session(client)
            self._prompt(session_id)

    def _prompt(self, session_id: str) -> None:
        with self._lock:
            session = self._sessions[session_id]
            session.cancel_this_turn = self._rng.random() < self.cancel_share
            session.cancel_sent = False
            self._in_flight += 1

        def done(response: Line, _read_ns: int) -> None:
            result = response.get("result")
            with self._lock:
                self._in_flight -= 1
                if isinstance(result, dict):
                    reason = str(result.get("stopReason"))
                    self.counts.stop_reasons[reason] = self.counts.stop_reasons.get(reason, 0) + 1
                else:
                    self.counts.prompt_errors += 1
            if isinstance(result, dict) and self._running.is_set():
                self._prompt(session_id)

        prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": "go"}]}
        try:
            session.client.request("session/prompt", prompt, done)
        except ConnectionClosed:
            with self._lock:
                self._in_flight -= 1
                self.counts.prompt_errors += 1

    def stop(self, timeout: float) -> int:
        """Start no more turns and wait (bounded) for those running; the number left."""
        self._running.clear()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self._in_flight == 0:
                    return 0
            time.sleep(0.1)
        with self._lock:
            return self._in_flight
