"""The soak's editors: short-lived connections churning through sessions, and long sessions.

A *churner* runs episodes back to back, each on a connection of its own: it opens a new
session (or reattaches one an earlier episode left, by ``session/load`` with or without
``afterSeq``, or by ``session/resume``), prompts it one to three times, sometimes lists the
sessions, and ends in one of four ways: ``session/close``, ``session/delete``, leaving (the
connection closed, the session kept for a later episode) or dropping (a prompt sent, the
connection cut while its turn runs, so the turn goes on detached; the session is kept too).

A *long session* is one session prompted in a loop for the whole run, so its history
reaches the compaction threshold again and again; every ``reattach_every`` turns its
connection is cut and it comes back with ``session/resume`` after the last frame it saw.
"""

from __future__ import annotations

import collections
import contextlib
import random
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from websockets.exceptions import ConnectionClosed, InvalidHandshake

from benchmarks.serve.ws_client import Line, WsLoadClient

__all__ = ["Counts", "Ending", "Soak"]

TURN_TIMEOUT_S = 180.0
"""Longest wait for a prompt's answer: a turn on a killed worker waits for its restart."""
CALL_TIMEOUT_S = 60.0
RUNNING_TIMEOUT_S = 10.0
"""How long a drop waits for its turn's first update before cutting the connection anyway."""
POOL_SIZE = 500
"""Sessions kept for reattaching; older ones are forgotten (they stay stored)."""
CONNECT_RETRY_S = 0.5

Ending = Literal["close", "delete", "leave", "drop"]
ENDINGS: tuple[tuple[Ending, float], ...] = (
    ("close", 0.3),
    ("delete", 0.25),
    ("leave", 0.25),
    ("drop", 0.2),
)
REATTACH_SHARE = 0.35
LIST_SHARE = 0.1
_DIGITS = re.compile(r"\d+")


@dataclass
class Counts:
    """What the editors did and saw; every change under ``lock``."""

    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    sessions_created: int = 0
    turns: int = 0
    long_turns: int = 0
    stop_reasons: dict[str, int] = field(default_factory=dict)
    prompt_errors: dict[str, int] = field(default_factory=dict)
    call_errors: dict[str, int] = field(default_factory=dict)
    actions: dict[str, int] = field(default_factory=dict)
    connections: int = 0
    connect_failures: int = 0

    def add(self, table: str, key: str) -> None:
        with self.lock:
            counts: dict[str, int] = getattr(self, table)
            counts[key] = counts.get(key, 0) + 1

    def as_dict(self) -> dict[str, Any]:
        with self.lock:
            return {k: v for k, v in vars(self).items() if k != "lock"}


def _error_kind(error: Any) -> str:
    """An error's code and message with numbers folded, so alike errors count together."""
    if not isinstance(error, dict):
        return str(error)[:80]
    message = _DIGITS.sub("N", str(error.get("message")))[:100]
    return f"{error.get('code')}: {message}"


class _Editor:
    """One connection, with the last frame number seen per session and a turn-running flag."""

    def __init__(self, soak: Soak, name: str) -> None:
        self.seq: dict[str, int] = {}
        self.updated = threading.Event()
        self.client = WsLoadClient(soak.url, soak.token, self._on_update, name=name)
        with soak.counts.lock:
            soak.counts.connections += 1

    def _on_update(self, session_id: str, update: dict[str, Any], _read_ns: int) -> None:
        meta = update.get("_meta")
        if isinstance(meta, dict):
            seq = (meta.get("toolprep") or {}).get("seq")
            if isinstance(seq, int):
                self.seq[session_id] = max(seq, self.seq.get(session_id, 0))
        self.updated.set()

    def ask(self, method: str, params: Any, timeout: float = CALL_TIMEOUT_S) -> Line:
        """The answer, or a local error when none came in time or the connection is gone."""
        done = threading.Event()
        box: list[Line] = []

        def got(response: Line, _read_ns: int) -> None:
            box.append(response)
            done.set()

        try:
            self.client.request(method, params, got)
        except ConnectionClosed:
            return {"error": {"code": None, "message": "connection closed"}}
        if not done.wait(timeout):
            return {"error": {"code": None, "message": f"no answer within {timeout} s"}}
        return box[0]

    def drop(self) -> None:
        """Cut the connection without a WebSocket close: the daemon sees it just end."""
        with contextlib.suppress(OSError):
            self.client.socket.socket.shutdown(socket.SHUT_RDWR)
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError, ConnectionClosed):
            self.client.close()


class Soak:
    """The shared state of the editors: where the daemon is, what they did, when to stop."""

    def __init__(self, url: str, token: str, workdir: str, seed: int) -> None:
        self.url = url
        self.token = token
        self.workdir = workdir
        self.seed = seed
        self.counts = Counts()
        self.stopping = threading.Event()
        self._pool: collections.deque[str] = collections.deque(maxlen=POOL_SIZE)
        self._pool_lock = threading.Lock()
        self._seqs: dict[str, int] = {}
        self._long_seq: dict[str, int] = {}

    # --- the pool of sessions left for a later episode ---------------------------------------

    def _leave(self, session_id: str, seq: int) -> None:
        with self._pool_lock:
            self._pool.append(session_id)
            self._seqs[session_id] = seq

    def _take(self, rng: random.Random) -> tuple[str, int] | None:
        with self._pool_lock:
            if not self._pool:
                return None
            index = rng.randrange(len(self._pool))
            session_id = self._pool[index]
            del self._pool[index]
            return session_id, self._seqs.pop(session_id, 0)

    # --- connections ----------------------------------------------------------------------------

    def _connect(self, name: str) -> _Editor | None:
        while not self.stopping.is_set():
            try:
                editor = _Editor(self, name)
            except (OSError, InvalidHandshake, TimeoutError):
                with self.counts.lock:
                    self.counts.connect_failures += 1
                time.sleep(CONNECT_RETRY_S)
                continue
            answer = editor.ask("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            if "result" in answer:
                return editor
            self.counts.add("call_errors", "initialize " + _error_kind(answer.get("error")))
            editor.close()
        return None

    def _prompt(self, editor: _Editor, session_id: str, long: bool = False) -> bool:
        """One turn, waited for; whether it was answered (any stop reason)."""
        params = {"sessionId": session_id, "prompt": [{"type": "text", "text": "go"}]}
        answer = editor.ask("session/prompt", params, TURN_TIMEOUT_S)
        result = answer.get("result")
        if not isinstance(result, dict):
            self.counts.add("prompt_errors", _error_kind(answer.get("error")))
            return False
        self.counts.add("stop_reasons", str(result.get("stopReason")))
        with self.counts.lock:
            self.counts.turns += 1
            self.counts.long_turns += long
        return True

    def _call(self, editor: _Editor, method: str, params: Any) -> Line:
        answer = editor.ask(method, params)
        self.counts.add("actions", method)
        if "error" in answer:
            self.counts.add("call_errors", f"{method} {_error_kind(answer['error'])}")
        return answer

    def _open(self, editor: _Editor, rng: random.Random) -> str | None:
        """A session to work in: a left one reattached, or a new one."""
        taken = self._take(rng) if rng.random() < REATTACH_SHARE else None
        if taken is not None:
            session_id, seq = taken
            params: dict[str, Any] = {"sessionId": session_id, "cwd": self.workdir}
            params["mcpServers"] = []
            if seq and rng.random() < 0.5:
                params["_meta"] = {"toolprep": {"afterSeq": seq}}
            method = "session/load" if rng.random() < 0.6 else "session/resume"
            answer = self._call(editor, method, params)
            return session_id if "result" in answer else None
        answer = self._call(editor, "session/new", {"cwd": self.workdir, "mcpServers": []})
        result = answer.get("result")
        if not isinstance(result, dict):
            return None
        with self.counts.lock:
            self.counts.sessions_created += 1
        created: str = result["sessionId"]
        return created

    # --- the two kinds of editor ----------------------------------------------------------------

    def churn(self, index: int) -> None:
        """Episodes until the soak stops (the one running when it does is finished)."""
        rng = random.Random(self.seed * 1000 + index)
        while not self.stopping.is_set():
            editor = self._connect(f"soak-churn-{index}")
            if editor is None:
                return
            try:
                self._episode(editor, rng)
            finally:
                editor.close()

    def _episode(self, editor: _Editor, rng: random.Random) -> None:
        if rng.random() < LIST_SHARE:
            self._call(editor, "session/list", {"cwd": self.workdir})
        session_id = self._open(editor, rng)
        if session_id is None:
            return
        for _ in range(rng.randint(0, 2)):
            self._prompt(editor, session_id)
        ending = rng.choices([e for e, _ in ENDINGS], [w for _, w in ENDINGS])[0]
        self.counts.add("actions", ending)
        match ending:
            case "close":
                self._prompt(editor, session_id)
                self._call(editor, "session/close", {"sessionId": session_id})
            case "delete":
                self._prompt(editor, session_id)
                self._call(editor, "session/delete", {"sessionId": session_id})
            case "leave":
                self._prompt(editor, session_id)
                self._leave(session_id, editor.seq.get(session_id, 0))
            case "drop":
                self._drop_mid_turn(editor, session_id)

    def _drop_mid_turn(self, editor: _Editor, session_id: str) -> None:
        editor.updated.clear()
        params = {"sessionId": session_id, "prompt": [{"type": "text", "text": "go"}]}
        try:
            editor.client.request("session/prompt", params, None)
        except ConnectionClosed:
            return
        editor.updated.wait(RUNNING_TIMEOUT_S)
        editor.drop()
        self._leave(session_id, editor.seq.get(session_id, 0))

    def long_session(self, index: int, reattach_every: int) -> None:
        """One session prompted until the soak stops, its connection cut and resumed now and
        then; closed at the end (it stays stored)."""
        name = f"soak-long-{index}"
        editor = self._connect(name)
        if editor is None:
            return
        answer = self._call(editor, "session/new", {"cwd": self.workdir, "mcpServers": []})
        if "result" not in answer:
            editor.close()
            return
        with self.counts.lock:
            self.counts.sessions_created += 1
        session_id: str = answer["result"]["sessionId"]
        turns = 0
        attached = True
        while not self.stopping.is_set():
            if not attached:
                attached = self._resume(editor, session_id)
            if not attached or not self._prompt(editor, session_id, long=True):
                time.sleep(CONNECT_RETRY_S)  # a worker restarting: try again shortly
                continue
            turns += 1
            if turns % reattach_every:
                continue
            seen = max(editor.seq.get(session_id, 0), self._long_seq.get(session_id, 0))
            self._long_seq[session_id] = seen
            editor.drop()
            self.counts.add("actions", "long reattach")
            reattached = self._connect(name)
            if reattached is None:
                return
            editor, attached = reattached, False
        self._call(editor, "session/close", {"sessionId": session_id})
        editor.close()

    def _resume(self, editor: _Editor, session_id: str) -> bool:
        """``session/resume`` after the last frame the long session's editor saw."""
        params = {
            "sessionId": session_id,
            "cwd": self.workdir,
            "mcpServers": [],
            "_meta": {"toolprep": {"afterSeq": self._long_seq.get(session_id, 0)}},
        }
        return "result" in self._call(editor, "session/resume", params)
