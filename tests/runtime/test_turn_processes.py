"""The host stops a session's leftover tool processes when its turn ends, and only then."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.runtime import scenarios as sc
from tests.support.processes import alive, gone_within
from tests.support.runtime_harness import harness
from toolprep.runtime.tools.config import ToolConfig
from toolprep.runtime.tools.registry import default_registry

KIND = "anthropic"


@pytest.mark.process  # the scenario runs a shell command
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
            assert refused.failure == "turn_running" and refused.stop_reason is None
            assert refused.error is not None and "already running" in refused.error
            time.sleep(0.5)  # SIGTERM would be immediate, and sleep dies of it
            assert alive(pid)
            h.runtime.cancel(session_id)
            assert turn.result(timeout=20).stop_reason == "cancelled"
            assert gone_within(pid, 20.0)
        finally:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
