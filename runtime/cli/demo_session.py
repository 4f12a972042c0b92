"""``toolprep demo``: the agent seen from the editor's side.

Starts ``toolprep acp`` on the embedded replay provider as a subprocess and
drives it over stdio exactly as an editor would: initialize, a new session
in a scratch project, then three prompts that show the lifecycle: a tool
call whose card appears while its arguments stream (preparing -> in_progress
-> completed), a retry after a mid-stream overload that discards the card of
the abandoned attempt, and a user cancel mid tool-call. It prints a timeline
of every frame under a legend of its columns (or the raw frames with ``--json``).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import orjson

from toolprep.runtime.acp.jsonrpc_connection import JsonRpcConnection

DEMO_README = """# Demo project

A tiny project the toolprep demo works in. The agent reads this file,
writes a note next to it, and gets cancelled while scanning the tree.
"""

PROMPTS = (
    ("Read README.md and tell me what this project is.", False),
    ("Write a short NOTES.md for this project.", False),
    ("Search the whole project for TODO markers.", True),
)


LEGEND = """\
Each line below is one ACP message between the demo (as the editor) and the agent, as it
arrived. Columns of a tool card's line:
  time        seconds since the demo started
  frame       tool_call opens a card in the editor, tool_call_update changes it; other lines
              are streamed text (message, thought), usage, and the demo's own requests
  toolCallId  the card the frame belongs to
  status      the card's ACP status: pending, in_progress (running), completed or failed
  phase       preparing: the card opened the moment the model named the tool, while its
              arguments were still streaming; nothing has run yet, and it has no arguments.
              discarded: that attempt was abandoned (retry, cancel) and the call never ran;
              the title in quotes is what an editor that ignores _meta shows
  tool        the tool the model called
"""
"""What the timeline's columns mean, printed above it: the early ``preparing`` card reads as a
glitch to anyone who does not know it is the point."""


class _Timeline:
    def __init__(self, json_output: bool) -> None:
        self.started = time.monotonic()
        self.json_output = json_output
        self.lock = threading.Lock()
        self.preparing_seen = threading.Event()
        self.frames: list[dict[str, Any]] = []
        self._text: tuple[str, str, list[str]] | None = None  # label, first time, fragments

    def elapsed(self) -> str:
        return f"{time.monotonic() - self.started:7.3f}s"

    def show(self, line: str) -> None:
        """A timeline line; with ``--json`` stdout holds only frames, so it goes to stderr."""
        with self.lock:
            self._flush_text()
            print(line, flush=True, file=sys.stderr if self.json_output else sys.stdout)

    def emit_raw(self, line: str) -> None:
        with self.lock:
            print(line, flush=True)

    def _flush_text(self) -> None:
        # Streamed text arrives in many small chunks; one line per run reads better.
        if self._text is not None:
            label, at, fragments = self._text
            self._text = None
            print(f"{at}  {label:<16} {''.join(fragments)!r} ({len(fragments)} chunks)", flush=True)

    def _add_text(self, label: str, text: str) -> None:
        with self.lock:
            if self._text is not None and self._text[0] != label:
                self._flush_text()
            if self._text is None:
                self._text = (label, self.elapsed(), [])
            self._text[2].append(text)

    def on_update(self, params: Any) -> None:
        update = params.get("update", {}) if isinstance(params, dict) else {}
        self.frames.append(params)
        meta = update.get("_meta") or {}
        if meta.get("phase") == "preparing" and not meta.get("preparationDiscarded"):
            self.preparing_seen.set()
        if self.json_output:
            self.emit_raw(
                orjson.dumps(
                    {"jsonrpc": "2.0", "method": "session/update", "params": params}
                ).decode()
            )
            return
        kind = update.get("sessionUpdate")
        if kind in ("agent_message_chunk", "agent_thought_chunk"):
            label = "message" if kind == "agent_message_chunk" else "thought"
            self._add_text(label, update.get("content", {}).get("text", ""))
            return
        if kind == "plan":
            self.show(
                f"{self.elapsed()}  plan             {len(update.get('entries', []))} entries"
            )
            return
        if kind == "usage_update":
            used, size = update.get("used", 0), update.get("size", 1)
            self.show(
                f"{self.elapsed()}  usage            {used} of {size} context tokens "
                f"({used / size:.2%})"
            )
            return
        if kind == "session_info_update":
            self.show(f"{self.elapsed()}  session title    {update.get('title')!r}")
            return
        phase = "discarded" if meta.get("preparationDiscarded") else meta.get("phase", "")
        line = (
            f"{self.elapsed()}  {kind:<16} {update.get('toolCallId', ''):<28} "
            f"{update.get('status', ''):<12} {phase:<10} {meta.get('toolName', '')}"
        )
        if meta.get("preparationDiscarded"):
            line += f'  "{update.get("title", "")}"'  # what a client unaware of _meta shows
        self.show(line)


def run_demo(*, json_output: bool = False, replay_file: str | None = None) -> int:
    timeline = _Timeline(json_output)
    if not json_output:
        timeline.show(LEGEND)
        timeline.show(
            "    time  frame            toolCallId                   status       phase      tool"
        )
    with tempfile.TemporaryDirectory(prefix="toolprep-demo-") as workdir:
        project = Path(workdir)
        (project / "README.md").write_text(DEMO_README)
        command = [sys.executable, "-m", "toolprep.runtime.cli", "acp", "--no-persist"]
        command += ["--provider", "replay"]
        if replay_file:
            command += ["--replay", replay_file]
        agent = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert agent.stdin is not None and agent.stdout is not None
        client = JsonRpcConnection(agent.stdout, agent.stdin)
        client.on_notification("session/update", timeline.on_update)
        client.on_request("session/request_permission", _allow_once)
        client.start()
        try:
            init = client.request(
                "initialize",
                {
                    "protocolVersion": 1,
                    "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}},
                },
            ).result(timeout=30)
            agent_name = init.get("agentInfo", {}).get("name")
            timeline.show(
                f"{timeline.elapsed()}  initialize       agent {agent_name} "
                f"protocol {init.get('protocolVersion')}"
            )
            session = client.request("session/new", {"cwd": str(project), "mcpServers": []}).result(
                timeout=30
            )
            session_id = session["sessionId"]
            options = {option.get("id"): option for option in session.get("configOptions", [])}
            model_option = options.get("model", {})
            choices = [option["value"] for option in model_option.get("options", [])]
            mode = session.get("modes", {}).get("currentModeId")
            timeline.show(
                f"{timeline.elapsed()}  session/new      model {model_option.get('currentValue')} "
                f"(editor may pick: {', '.join(choices)}), mode {mode}"
            )
            for text, cancel in PROMPTS:
                timeline.show(f"{timeline.elapsed()}  prompt           {text!r}")
                timeline.preparing_seen.clear()
                reply: Future[Any] = client.request(
                    "session/prompt",
                    {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]},
                )
                if cancel:
                    timeline.preparing_seen.wait(timeout=30)
                    timeline.show(f"{timeline.elapsed()}  cancel           (user pressed stop)")
                    client.notify("session/cancel", {"sessionId": session_id})
                result = reply.result(timeout=60)
                timeline.show(
                    f"{timeline.elapsed()}  prompt reply     stopReason={result.get('stopReason')}"
                )
        finally:
            agent.stdin.close()
            try:
                agent.wait(timeout=15)
            except subprocess.TimeoutExpired:
                agent.kill()
            client.close()
    return 0 if agent.returncode == 0 else 1


def _allow_once(params: Any, request_id: Any = None) -> dict[str, Any]:
    return {"outcome": {"outcome": "selected", "optionId": "allow_once"}}
