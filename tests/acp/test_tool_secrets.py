"""No secret of the agent's environment reaches a tool, an MCP server or the provider.

The real ``toolprep acp`` (in one process and with worker processes) starts
with tokens, passwords and cloud credentials in its environment; the model
runs ``env`` and asks an MCP server for its whole environment. What the
provider and the editor get back must hold none of them, apart from the
variables the user handed through with ``--pass-env`` and the values the
client set for the MCP server itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from acp import text_block
from acp.schema import EnvVariable, McpServerStdio

from tests.acp.conftest import REPO, RecordingClient, agent_command, running_agent
from tests.runtime import scenarios as sc
from tests.support.fake_provider import FakeProviderServer
from tests.support.runtime_harness import lifecycle, tool_frames

KIND = "anthropic"

SECRETS = {
    "TOOLPREP_TOKEN": "serve-token-secrettest-81c2d",
    "GITHUB_TOKEN": "ghp_secrettest_5a9e03b7d1",
    "GH_TOKEN": "gho_secrettest_c4d2e8a9f0",
    "AWS_ACCESS_KEY_ID": "AKIASECRETTEST7Q2W",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-secrettest-0e1f2a",
    "DATABASE_URL": "postgres://app:db-pass-secrettest@db.internal/app",
    "BILLING_SECRET": "billing-secret-secrettest-3b",
    "DEPLOY_PASSWORD": "deploy-pass-secrettest-77",
    "GOOGLE_APPLICATION_CREDENTIALS": "/run/secrets/gcp-secrettest.json",
    "deploy_token": "lower-case-secrettest-9d",
    "HTTPS_PROXY": "http://proxyuser:proxy-pass-secrettest@proxy.internal:3128",
}
PASSED = {
    "NPM_TOKEN": "npm_passed_secrettest_4c",  # --pass-env
    "HF_TOKEN": "hf_passed_secrettest_8e",  # TOOLPREP_PASS_ENV
}
HARMLESS = {
    "LANG": "C.UTF-8",
    "TERM": "xterm-secrettest",
    "XDG_CONFIG_HOME": "/tmp/xdg-secrettest",
    "KEYBOARD_LAYOUT": "keyboard-secrettest",
    "TOKENIZERS_PARALLELISM": "false",
}
FROM_THE_CLIENT = "client-given-token-secrettest-2f"


def _agent(server: FakeProviderServer, workers: str) -> tuple[list[str], dict[str, str]]:
    command, env = agent_command(
        KIND, server, "--no-persist", "--workers", workers, "--pass-env", "NPM_TOKEN"
    )
    env |= SECRETS | PASSED | HARMLESS | {"TOOLPREP_PASS_ENV": "HF_TOKEN"}
    return command, env


def _check_only_allowed_variables(seen_by: str) -> None:
    for name, value in SECRETS.items():
        assert value not in seen_by
        assert f"{name}=" not in seen_by
    for name, value in (PASSED | HARMLESS).items():
        assert f"{name}={value}" in seen_by
    assert "TOOLPREP_PASS_ENV" not in seen_by  # the agent's configuration stays its own


@pytest.mark.parametrize("workers", ["1", "2"])
async def test_a_shell_command_sees_no_secret_but_what_was_passed(
    workers: str, tmp_path: Path
) -> None:
    shell = ("call_env", "run_shell_command", {"command": "env"})
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.calls_turn(KIND, [shell])), sc.ok(sc.text_turn(KIND, "Seen.")))
        command, env = _agent(server, workers)
        client = RecordingClient()
        async with running_agent(command, env, client) as (conn, _):
            session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("env?")])
        assert reply.stop_reason == "end_turn"
        assert lifecycle(client.frames()) == {"call_env": ["preparing", "in_progress", "completed"]}
        _check_only_allowed_variables(json.dumps(server.requests[1].body))
        _check_only_allowed_variables(json.dumps(client.frames()))


@pytest.mark.parametrize("workers", ["1", "2"])
async def test_an_mcp_server_sees_no_secret_but_what_was_passed_or_given(
    workers: str, tmp_path: Path
) -> None:
    echo = McpServerStdio(
        name="echo",
        command=sys.executable,
        args=["-m", "tests.support.mcp_echo_server"],
        env=[
            EnvVariable(name="PYTHONPATH", value=str(REPO)),
            # The client's own entry goes through as given, secret-like name and all.
            EnvVariable(name="SERVER_API_TOKEN", value=FROM_THE_CLIENT),
        ],
    )
    call: sc.Call = ("call_environ", "mcp__echo__environ", {})
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.calls_turn(KIND, [call])), sc.ok(sc.text_turn(KIND, "Seen.")))
        command, env = _agent(server, workers)
        client = RecordingClient()
        async with running_agent(command, env, client) as (conn, _):
            session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[echo])
            reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("env?")])
        assert reply.stop_reason == "end_turn"
        terminal = [f for f in tool_frames(client.frames()) if f.get("status") == "completed"]
        assert len(terminal) == 1, client.frames()
        card = json.dumps(terminal[0]["content"])
        _check_only_allowed_variables(card)
        assert f"SERVER_API_TOKEN={FROM_THE_CLIENT}" in card
        _check_only_allowed_variables(json.dumps(server.requests[1].body))


@pytest.mark.parametrize(
    ("options", "extra_env", "named"),
    [
        (["--pass-env", "ANTHROPIC_API_KEY"], {}, "ANTHROPIC_API_KEY"),
        (["--pass-env", "TOOLPREP_TOKEN"], {"TOOLPREP_TOKEN": "t0ken-value-123"}, "TOOLPREP_TOKEN"),
        ([], {"TOOLPREP_PASS_ENV": "KEY_COPY", "KEY_COPY": "test-key"}, "KEY_COPY"),
    ],
    ids=["provider-key", "serve-token", "copy-of-the-key"],
)
def test_passing_a_provider_key_or_the_serve_token_is_refused_at_start(
    options: list[str], extra_env: dict[str, str], named: str
) -> None:
    with FakeProviderServer() as server:
        command, env = agent_command(KIND, server, "--no-persist", *options)
        done = subprocess.run(
            command,
            env=env | extra_env,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 2, done.stderr
    assert f"toolprep: cannot pass {named} to tools (--pass-env)" in done.stderr
    assert "Traceback" not in done.stderr
