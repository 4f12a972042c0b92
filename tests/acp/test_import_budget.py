"""``toolprep acp`` answers, and refuses, without loading what it does not need yet.

An ``import anthropic`` alone is over a second of CPU, many on a busy machine,
so the replay provider must import no SDK at all, an SDK provider's import
must not hold back ``initialize`` or ``session/new``, and a bad option must be
refused before anything heavy is loaded. Each test runs the real agent.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.agent_process import AgentProcess

HEAVY = ("anthropic", "openai", "mcp", "ray", "websockets", "opentelemetry", "prometheus_client")
"""Third-party packages an agent on the replay provider never needs (telemetry included:
it is off unless the ``OTEL_*`` variables ask for it)."""

RUNTIME = ("toolprep.actors", "toolprep.runtime.hosting.runtime", "toolprep.runtime.acp.agent")
"""Our own modules a refused start has no use for."""

DEADLINE_S = 120.0

_IMPORT_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", re.MULTILINE)


def _environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(extra)
    return env


def _imported(stderr: str) -> set[str]:
    """Every module ``-X importtime`` reports the process imported."""
    return set(_IMPORT_LINE.findall(stderr))


def _under(modules: set[str], packages: tuple[str, ...]) -> set[str]:
    return {m for m in modules if any(m == p or m.startswith(p + ".") for p in packages)}


def _agent(tmp_path: Path, *options: str, env: dict[str, str] | None = None) -> AgentProcess:
    command = [sys.executable, "-X", "importtime", "-m", "toolprep.runtime.cli", "acp", *options]
    return AgentProcess(command, env or _environment(), tmp_path, tmp_path / "stderr.log")


def test_replay_agent_imports_no_sdk_mcp_ray_or_websockets(tmp_path: Path) -> None:
    agent = _agent(tmp_path, "--provider", "replay", "--workers", "1", "--no-persist")
    try:
        session_id = agent.start_session(tmp_path)
        agent.reply(agent.prompt(session_id, "Read README.md"), timeout=DEADLINE_S)
        agent.close_input()
        assert agent.wait_exit(DEADLINE_S) == 0
    finally:
        agent.kill()
    imported = _imported(agent.stderr())
    assert "toolprep.runtime.providers.replay" in imported  # the report covers the run
    assert _under(imported, HEAVY) == set()


_BLOCKING_SDK = '''"""Stands in for the SDK: its import never finishes."""
import threading

threading.Event().wait()
'''


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_initialize_and_session_new_do_not_wait_for_the_sdk_import(
    tmp_path: Path, kind: str
) -> None:
    """An SDK whose import never ends must not hold back the replies before a prompt."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / f"{kind}.py").write_text(_BLOCKING_SDK)
    env = _environment(PYTHONPATH=str(shadow), **{f"{kind.upper()}_API_KEY": "test-key"})
    command = [sys.executable, "-m", "toolprep.runtime.cli", "acp", "--provider", kind]
    options = ["--base-url", "http://127.0.0.1:9", "--workers", "1", "--no-persist"]
    agent = AgentProcess([*command, *options], env, tmp_path, tmp_path / "stderr.log")
    try:
        session_id = agent.start_session(tmp_path)  # initialize, then session/new
        assert session_id
        agent.close_input()
        assert agent.wait_exit(DEADLINE_S) == 0
    finally:
        agent.kill()


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--replay", "{missing}"], "toolprep: replay script {missing}: No such file or directory"),
        (["--replay", "{broken}"], "toolprep: replay script {broken}: not valid JSON"),
        (["--replay", "{not_a_script}"], "toolprep: replay script: provider must be"),
        (["--workers", "0"], "toolprep: --workers must be >= 1, got 0"),
        (["--max-retries", "-1"], "toolprep: --max-retries must be >= 0"),
        (["--max-line-bytes", "0"], "toolprep: --max-line-bytes must be >= 1, got 0"),
        (["--mcp-call-timeout", "0"], "toolprep: --mcp-call-timeout must be > 0, got 0.0"),
        (["--compact-at", "1.5"], "toolprep: --compact-at must be a fraction of the context"),
        (["--provider", "openai"], "toolprep: the openai provider needs OPENAI_API_KEY"),
    ],
)
def test_refusals_come_before_any_heavy_import(
    tmp_path: Path, options: list[str], said: str
) -> None:
    paths = {
        "missing": str(tmp_path / "missing.json"),
        "broken": str(tmp_path / "broken.json"),
        "not_a_script": str(tmp_path / "not_a_script.json"),
    }
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "not_a_script.json").write_text('{"provider": "gemini", "turns": []}')
    command = [sys.executable, "-X", "importtime", "-m", "toolprep.runtime.cli", "acp"]
    done = subprocess.run(
        [*command, *(option.format(**paths) for option in options)],
        env=_environment(),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    said_lines = [line for line in done.stderr.splitlines() if not line.startswith("import time")]
    assert (done.returncode, len(said_lines)) == (2, 1), done.stderr[-2000:]
    assert said_lines[0].startswith(said.format(**paths))
    imported = _imported(done.stderr)
    assert "toolprep.runtime.hosting.assembly" in imported  # the report covers our own imports
    assert _under(imported, HEAVY + RUNTIME) == set()
