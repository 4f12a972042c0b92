"""run_shell_command with real subprocesses: permission, timeout, output cap, cancellation."""

from __future__ import annotations

import os
import signal
import sys
import threading
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from tests.support.eventually import eventually
from tests.support.processes import pid_from
from toolprep.runtime.tools.base import ToolContext, ToolError
from toolprep.runtime.tools.config import ToolConfig
from toolprep.runtime.tools.shell import RunShellCommandTool, is_preapproved

Validate = Any
ALLOW = ToolConfig(allow_shell=True)


def _alive(pid: int) -> bool:
    """True if ``pid`` runs and is not a zombie (containers may never reap orphans)."""
    stat = Path(f"/proc/{pid}/stat")
    if stat.parent.parent.is_dir() and Path("/proc/self").exists():
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except (FileNotFoundError, ProcessLookupError):
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_dead(pid: int, within: float = 3.0) -> bool:
    try:
        return eventually(lambda: not _alive(pid), timeout=within)
    except AssertionError:
        return False


def test_runs_in_cwd_with_combined_output_and_exit_code(
    cwd: Path, ctx: ToolContext, acp_validate: Validate
) -> None:
    tool = RunShellCommandTool(ALLOW)
    out = tool.run({"command": "pwd; echo out; echo err >&2; exit 3"}, ctx)
    assert out.llm_output.splitlines() == [str(cwd), "out", "err", "[exit code 3]"]
    assert out.raw_output == {
        "exit_code": 3,
        "output_bytes": len(f"{cwd}\nout\nerr\n"),
        "truncated": False,
    }
    assert any("Exit code 3" in item["content"]["text"] for item in out.content)
    for item in out.content:
        acp_validate("ToolCallContent", item)
    assert tool.kind == "execute"
    assert tool.title({"command": "ls -la"}) == "Run ls -la"
    assert tool.locations({"command": "ls"}, cwd) == []


def test_success_and_signal_exit(ctx: ToolContext) -> None:
    tool = RunShellCommandTool(ALLOW)
    quiet = tool.run({"command": "true"}, ctx)
    assert quiet.llm_output == "(no output)\n[exit code 0]"
    assert quiet.raw_output["exit_code"] == 0
    killed = tool.run({"command": "kill -9 $$"}, ctx)
    assert "killed by signal SIGKILL" in killed.llm_output
    assert killed.raw_output["exit_code"] == -signal.SIGKILL


def test_needs_permission_follows_config() -> None:
    assert RunShellCommandTool().needs_permission({"command": "ls"}) is True
    assert RunShellCommandTool(ALLOW).needs_permission({"command": "rm -rf x"}) is False
    tool = RunShellCommandTool(ToolConfig(allowed_commands=("ls", "git status")))
    assert tool.needs_permission({"command": "ls -la src"}) is False
    assert tool.needs_permission({"command": "git status --short"}) is False
    assert tool.needs_permission({"command": "git log"}) is True
    assert tool.needs_permission({"command": "lsof"}) is True
    assert tool.needs_permission({}) is True


@pytest.mark.parametrize(
    "command",
    [
        "ls; rm -rf x",
        "ls && rm x",
        "ls | sh",
        "ls $(rm x)",
        "ls `rm x`",
        "ls > f",
        "ls\nrm x",
        "ls &",
    ],
)
def test_shell_operators_are_never_preapproved(command: str) -> None:
    assert not is_preapproved(command, ("ls",))


def test_permission_allowed_runs_command(cwd: Path, make_ctx: Any, answer: Any) -> None:
    recorder = answer("allow_once")
    out = RunShellCommandTool().run(
        {"command": "echo ran > marker"}, make_ctx(request_permission=recorder)
    )
    assert (cwd / "marker").read_text() == "ran\n"
    assert out.raw_output["exit_code"] == 0
    [request] = recorder.requests
    assert request.tool_call_id == "call-1"
    assert request.tool_name == "run_shell_command"
    assert request.kind == "execute"
    assert request.title == "Run echo ran > marker"
    assert dict(request.raw_input) == {"command": "echo ran > marker"}


@pytest.mark.parametrize(
    ("outcome", "message"),
    [
        ("reject_once", "was not allowed"),
        ("reject_always", "was not allowed"),
        ("cancelled", "Cancelled while waiting for permission"),
    ],
)
def test_permission_refused_runs_nothing(
    cwd: Path, make_ctx: Any, answer: Any, outcome: str, message: str
) -> None:
    with pytest.raises(ToolError, match=message):
        RunShellCommandTool().run(
            {"command": "echo ran > marker"}, make_ctx(request_permission=answer(outcome))
        )
    assert not (cwd / "marker").exists()


def test_no_permission_channel_counts_as_rejected(cwd: Path, ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="was not allowed"):
        RunShellCommandTool().run({"command": "echo ran > marker"}, ctx)
    assert not (cwd / "marker").exists()


def test_preapproved_command_does_not_ask(make_ctx: Any, answer: Any) -> None:
    recorder = answer("reject_once")
    tool = RunShellCommandTool(ToolConfig(allowed_commands=("echo",)))
    out = tool.run({"command": "echo fine"}, make_ctx(request_permission=recorder))
    assert out.llm_output.startswith("fine")
    assert recorder.requests == []


def test_timeout_kills_and_reports_output_so_far(cwd: Path, ctx: ToolContext) -> None:
    command = "echo begun; sleep 30 & echo $! > sleep.pid; wait; touch finished"
    # Long enough for a busy machine to start bash and reach the sleep; far below its end.
    with pytest.raises(ToolError, match=r"timed out after 2 s") as err:
        RunShellCommandTool(ALLOW).run({"command": command, "timeout_s": 2}, ctx)
    assert "begun" in str(err.value)
    # Killed, not waited for: the command never reached its end, and its sleep is gone.
    assert not (cwd / "finished").exists()
    assert _wait_dead(int((cwd / "sleep.pid").read_text()))


def test_context_timeout_bounds_requested_timeout(make_ctx: Any) -> None:
    tool = RunShellCommandTool(ALLOW)
    ctx = make_ctx(timeout=0.2)
    assert tool.timeout_for({"timeout_s": 100}, ctx) == 0.2
    bounded = RunShellCommandTool(ToolConfig(default_timeout_s=2, max_timeout_s=5))
    assert bounded.timeout_for({"timeout_s": 100}, make_ctx()) == 5
    assert bounded.timeout_for({}, make_ctx()) == 2
    assert tool.timeout_for({"timeout_s": float("nan")}, ctx) == 0.2
    with pytest.raises(ToolError, match="timed out"):
        tool.run({"command": "sleep 30"}, ctx)


def test_huge_output_keeps_head_and_tail_in_bounded_memory(ctx: ToolContext) -> None:
    total = 20 * 1024 * 1024
    script = (
        "import sys; w = sys.stdout.write; w('START\\n'); "
        f"[w('x' * 1023 + '\\n') for _ in range({total // 1024})]; w('END\\n')"
    )
    command = f'{sys.executable} -c "{script}"'
    cap = 64 * 1024
    tracemalloc.start()
    try:
        out = RunShellCommandTool(ToolConfig(allow_shell=True, max_shell_output_bytes=cap)).run(
            {"command": command}, ctx
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * 1024 * 1024
    assert out.raw_output["output_bytes"] == total + len("START\nEND\n")
    assert out.raw_output["truncated"] is True
    assert out.llm_output.startswith("START\n")
    assert out.llm_output.endswith("END\n[exit code 0]")
    assert "bytes of output omitted" in out.llm_output
    assert len(out.llm_output.encode()) < cap + 200


def test_cancel_kills_the_whole_process_group(cwd: Path, make_ctx: Any) -> None:
    cancelled = threading.Event()
    ctx = make_ctx(cancelled=cancelled)

    def cancel_once_running() -> None:  # as the editor would, mid-command
        pid_from(cwd / "bg.pid", 60)
        cancelled.set()

    canceller = threading.Thread(target=cancel_once_running, daemon=True)
    canceller.start()
    try:
        with pytest.raises(ToolError, match="cancelled"):
            RunShellCommandTool(ALLOW).run(
                {"command": "sleep 30 & echo $! > bg.pid; sleep 30; touch finished"}, ctx
            )
    finally:
        cancelled.set()
        canceller.join(60)
    # Killed, not waited for: the command never reached its end, and its whole group is gone.
    assert not (cwd / "finished").exists()
    assert _wait_dead(int((cwd / "bg.pid").read_text()))


def test_already_cancelled_does_not_start(cwd: Path, make_ctx: Any) -> None:
    cancelled = threading.Event()
    cancelled.set()
    with pytest.raises(ToolError, match="cancelled"):
        RunShellCommandTool(ALLOW).run({"command": "touch marker"}, make_ctx(cancelled=cancelled))
    assert not (cwd / "marker").exists()


def test_background_child_holding_the_pipe_does_not_block(cwd: Path, ctx: ToolContext) -> None:
    out = RunShellCommandTool(ALLOW).run({"command": "sleep 60 & echo $! > bg.pid; echo done"}, ctx)
    pid = int((cwd / "bg.pid").read_text())
    try:
        # Returned while the child still holds the pipe: the tool did not wait for its end.
        assert _alive(pid)
        assert out.llm_output.startswith("done\n")
        assert "background processes" in out.llm_output
    finally:
        os.kill(pid, signal.SIGKILL)
