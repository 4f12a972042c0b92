"""The host stops a session's leftover tool processes when its turn ends, and only then."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from tests.runtime import scenarios as sc
from tests.support.runtime_harness import harness
from toolprep.runtime.tools.config import ToolConfig
from toolprep.runtime.tools.registry import default_registry

KIND = "anthropic"


def _alive(pid: int) -> bool:
    """True if ``pid`` runs and is not a zombie (containers may never reap orphans)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _gone_within(pid: int, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_a_refused_prompt_leaves_the_running_turn_s_processes_alone(tmp_path: Path) -> None:
    background = (
        "call_bg",
        "run_shell_command",
        {"command": "sleep 300 > /dev/null 2>&1 & echo $! > bg.pid"},
    )
    registry = default_registry(ToolConfig(allow_shell=True))
    with harness(KIND, tmp_path, registry=registry) as h:
        h.server.enqueue(
            sc.ok(sc.calls_turn(KIND, [background])),
            sc.prepared_then_stall(KIND, ("call_next", "read_file", {"path": "x"})),
        )
        session_id, sink = h.session()
        turn = h.prompt(session_id, sink)
        sink.wait_for(lambda frames: any(f.get("toolCallId") == "call_next" for f in frames))
        pid = int((tmp_path / "bg.pid").read_text())
        try:
            refused = h.runtime.prompt(session_id, []).result(timeout=10)
            assert refused.error == "A prompt is already running in this session"
            time.sleep(0.5)  # SIGTERM would be immediate, and sleep dies of it
            assert _alive(pid)
            h.runtime.cancel(session_id)
            assert turn.result(timeout=20).stop_reason == "cancelled"
            assert _gone_within(pid)
        finally:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
