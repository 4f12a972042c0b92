"""An editor that answers the agent's requests the instant it reads them, behind worker processes.

Such an editor's reply can be back before the agent has finished handing the
request on; the worker front then gets the answer on the thread that relays
that worker's frames. It used to wait there for the worker's receipt, which
only that thread could read, so the session froze until the front's 30 s call
timeout gave up on the answer (and logged nothing). Every turn here must end
without any answer being given up on.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.runtime import scenarios as sc
from tests.support.agent_process import AgentProcess, agent_command
from tests.support.message_log import Message
from tests.support.runtime_harness import check_cards, lifecycle
from toolprep.testing import FakeProviderServer

KIND = "anthropic"
PROMPTS = 200
SESSIONS = 2  # one per worker: the front places each new session on the least loaded one
REPLY_S = 120.0
NOT_TAKEN = "was not taken"  # the front's warning for an answer it gave up on


class AnsweringAtOnce(AgentProcess):
    """Answers every agent request on the thread that read it, before reading on:
    permission granted, files read from and written to disk."""

    def __init__(self, *args: Any) -> None:
        self._write_lock = threading.Lock()
        self.asked: Counter[str] = Counter()
        super().__init__(*args)

    def send(self, message: Message) -> None:
        with self._write_lock:  # prompts go out from the test, answers from the reader
            super().send(message)

    def record(self, message: Message) -> None:
        super().record(message)
        method, params = message.get("method"), message.get("params") or {}
        if method is None or "id" not in message:
            return
        self.asked[method] += 1
        result: dict[str, Any]
        match method:
            case "session/request_permission":
                result = {"outcome": {"outcome": "selected", "optionId": "allow_once"}}
            case "fs/read_text_file":
                result = {"content": Path(params["path"]).read_text()}
            case "fs/write_text_file":
                Path(params["path"]).write_text(params["content"])
                result = {}
            case _:
                raise AssertionError(f"an agent request this editor does not serve: {message}")
        self.send({"jsonrpc": "2.0", "id": message["id"], "result": result})


def _call(n: int) -> sc.Call:
    """The n-th tool call: a shell command (asks permission), an editor read or write."""
    match n % 3:
        case 0:
            return sc.shell(f"echo {n}", f"call_{n}")
        case 1:
            return (f"call_{n}", "read_file", {"path": "notes.txt"})
        case _:
            return (f"call_{n}", "write_file", {"path": f"out_{n}.txt", "content": f"{n}\n"})


def _start_sessions(agent: AgentProcess, cwd: Path) -> list[str]:
    fs = {"readTextFile": True, "writeTextFile": True}
    capabilities = {"protocolVersion": 1, "clientCapabilities": {"fs": fs}}
    agent.reply(agent.request("initialize", capabilities))
    opened = [
        agent.reply(agent.request("session/new", {"cwd": str(cwd), "mcpServers": []}))
        for _ in range(SESSIONS)
    ]
    return [str(answer["result"]["sessionId"]) for answer in opened]


def _completed_calls(frames: Sequence[dict[str, Any]]) -> set[str]:
    return {call for call, states in lifecycle(frames).items() if states[-1] == "completed"}


def test_turns_end_when_the_editor_answers_every_request_at_once(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("on disk\n")
    with FakeProviderServer() as server:
        command, env = agent_command(KIND, server, "--no-persist", "--workers", "2")
        agent = AnsweringAtOnce(command, env, tmp_path, tmp_path / "stderr.log")
        try:
            sessions = _start_sessions(agent, tmp_path)
            replies: list[Message] = []
            for first in range(0, PROMPTS, SESSIONS):
                # A call turn, then a text turn, per prompt; the sessions run side by side
                # and take them in whatever order they ask, so a turn makes zero or more
                # calls, but every call made is answered and every prompt ends.
                for n in range(first, first + SESSIONS):
                    server.enqueue(
                        sc.ok(sc.calls_turn(KIND, [_call(n)])), sc.ok(sc.text_turn(KIND))
                    )
                asked = [agent.prompt(session) for session in sessions]
                replies.extend(agent.reply(request_id, REPLY_S) for request_id in asked)
            agent.close_input()
            assert agent.wait_exit() == 0
        finally:
            agent.kill()
        log = agent.stderr()
    assert server.pending == 0
    assert [r.get("result", r)["stopReason"] for r in replies] == ["end_turn"] * PROMPTS
    assert NOT_TAKEN not in log, log
    assert "did not answer" not in log, log
    frames = agent.updates()
    check_cards(frames)
    assert _completed_calls(frames) == {f"call_{n}" for n in range(PROMPTS)}
    expected = Counter(_call(n)[1] for n in range(PROMPTS))
    assert agent.asked == {
        "session/request_permission": expected["run_shell_command"],
        "fs/read_text_file": expected["read_file"],
        "fs/write_text_file": expected["write_file"],
    }
    written = {p.name for p in tmp_path.glob("out_*.txt")}
    assert written == {f"out_{n}.txt" for n in range(PROMPTS) if n % 3 == 2}
