"""No secret of the agent's environment reaches a tool, an MCP server or the provider.

The real ``toolprep acp`` (in one process and with worker processes) starts
with tokens, passwords and cloud credentials in its environment; the model
runs ``env`` and asks an MCP server for its whole environment. What the
provider and the editor get back must hold none of them, apart from the
variables the user handed through with ``--pass-env`` and the values the
client set for the MCP server itself.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from acp import text_block
from acp.schema import EnvVariable, McpServerStdio

from tests.runtime import scenarios as sc
from tests.support.agent_process import REPO, RecordingClient, agent_command, running_agent
from tests.support.processes import worker_pids_of
from tests.support.runtime_harness import lifecycle, tool_frames
from toolprep.testing import FakeProviderServer

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


# What a command may find about its parents without their environment: their environment
# blocks and command lines, encoded so that masking the output cannot recognise them.
PROBE = (
    'for p in $PPID $(cut -d" " -f4 /proc/$PPID/stat); do for f in environ cmdline; do '
    'echo "B64:$(base64 -w0 /proc/$p/$f)"; '
    "echo \"HEX:$(xxd -p /proc/$p/$f | tr -d '\\n')\"; "
    "echo \"OCT:$(od -An -v -tx1 /proc/$p/$f | tr -d ' \\n')\"; "
    "echo \"REV:$(tr '\\0' '\\n' < /proc/$p/$f | rev | tr '\\n' ' ')\"; "
    "done; done"
)
ORGANISATION = {"OPENAI_ORG_ID": "org-secrettest-6f1e2d", "OPENAI_PROJECT_ID": "proj_secrettest_9c"}
URL_PASSWORD = "url-pass-secrettest-d41"


def _decoded(output: str) -> str:
    """Everything ``PROBE`` printed, decoded back to text."""
    parts: list[str] = [output]
    for line in output.splitlines():
        label, _, data = line.partition(":")
        raw = b""
        if label == "B64":
            raw = base64.b64decode(data)
        elif label in ("HEX", "OCT"):
            raw = bytes.fromhex(data)
        elif label == "REV":
            raw = data[::-1].encode()
        parts.append(raw.replace(b"\0", b"\n").decode(errors="replace"))
    return "\n".join(parts)


def _with_password(url: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://user:{URL_PASSWORD}@{rest}"


@pytest.mark.parametrize("workers", ["1", "2"])
async def test_no_command_reads_a_secret_from_its_parents_environment_or_command_line(
    workers: str, tmp_path: Path
) -> None:
    shell = ("call_probe", "run_shell_command", {"command": PROBE})
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.calls_turn(KIND, [shell])), sc.ok(sc.text_turn(KIND, "Seen.")))
        command, env = _agent(server, workers)
        command += ["--mode", "auto"]
        env |= ORGANISATION
        client = RecordingClient()
        async with running_agent(command, env, client) as (conn, process):
            session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("look")])
            agents = [process.pid, *worker_pids_of(process.pid)]
            # What the test itself reads of the agent's processes, as root can.
            own_view = {
                pid: (Path(f"/proc/{pid}/environ").read_bytes(), Path(f"/proc/{pid}/cmdline"))
                for pid in agents
            }
            blocks = {pid: (e, c.read_bytes()) for pid, (e, c) in own_view.items()}
        assert reply.stop_reason == "end_turn"
        assert lifecycle(client.frames()) == {
            "call_probe": ["preparing", "in_progress", "completed"]
        }
    assert len(agents) == int(workers) + (1 if workers == "2" else 0)
    secrets = [*SECRETS.values(), *ORGANISATION.values(), "test-key"]
    seen = _decoded(json.dumps(server.requests[1].body).replace("\\n", "\n"))
    # The command did read its parents (as root; another user's agent is unreadable).
    assert "KEYBOARD_LAYOUT=keyboard-secrettest" in seen or (
        os.geteuid() != 0 and "Permission denied" in seen
    ), seen
    for secret in secrets:
        assert secret not in seen
        for environ, cmdline in blocks.values():
            assert secret.encode() not in environ
            assert secret.encode() not in cmdline
    for environ, _ in blocks.values():  # the agent's own view was read, not an empty one
        assert b"KEYBOARD_LAYOUT=keyboard-secrettest" in environ


@pytest.mark.parametrize("workers", ["1", "2"])
async def test_a_password_in_the_base_url_is_on_no_command_line(
    workers: str, tmp_path: Path
) -> None:
    with FakeProviderServer() as server:
        command, env = _agent(server, workers)
        base_url = command.index("--base-url") + 1
        command[base_url] = _with_password(command[base_url])
        client = RecordingClient()
        async with running_agent(command, env, client) as (conn, process):
            await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            agents = [process.pid, *worker_pids_of(process.pid)]
            lines = {pid: Path(f"/proc/{pid}/cmdline").read_bytes() for pid in agents}
    assert len(agents) == int(workers) + (1 if workers == "2" else 0)
    for line in lines.values():
        assert b"toolprep" in line  # read while running
        assert URL_PASSWORD.encode() not in line


PRIVATE_KEY = "-----BEGIN OPENSSH PRIVATE KEY----- secrettest-ssh-5be0"
STORED = "stored-in-the-data-dir-secrettest-11"


@pytest.mark.parametrize("workers", ["1", "2"])
async def test_the_file_tools_refuse_credentials_and_the_data_dir_and_mask_secrets(
    workers: str, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(PRIVATE_KEY + "\n")
    (home / ".env").write_text(f"ANTHROPIC_API_KEY=test-key\nDEPLOY={SECRETS['DEPLOY_PASSWORD']}\n")
    data = home / "agent-data"
    data.mkdir()
    (data / "notes.txt").write_text(STORED + "\n")
    calls: list[sc.Call] = [
        ("call_env", "read_file", {"path": ".env"}),
        ("call_ssh", "read_file", {"path": ".ssh/id_ed25519"}),
        ("call_data", "read_file", {"path": "agent-data/notes.txt"}),
        ("call_search", "search", {"pattern": "secrettest"}),
        ("call_list", "list_directory", {"path": ".ssh"}),
    ]
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.calls_turn(KIND, calls)), sc.ok(sc.text_turn(KIND, "Seen.")))
        command, env = agent_command(
            KIND, server, "--workers", workers, "--mode", "plan", "--data-dir", str(data)
        )
        env |= SECRETS | {"HOME": str(home)}
        client = RecordingClient()
        async with running_agent(command, env, client) as (conn, _):
            session = await conn.new_session(cwd=str(home), mcp_servers=[])
            reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("read")])
        assert reply.stop_reason == "end_turn"
    ends = {call: states[-1] for call, states in lifecycle(client.frames()).items()}
    assert ends == {
        "call_env": "completed",
        "call_ssh": "failed",
        "call_data": "failed",
        "call_search": "completed",
        "call_list": "failed",
    }
    to_model = json.dumps(server.requests[1].body)
    for seen in (to_model, json.dumps(client.frames())):
        assert "DEPLOY=[redacted]" in seen  # the .env was read, its secrets masked
        assert "kept from tools" in seen
        for secret in ("test-key", SECRETS["DEPLOY_PASSWORD"], "secrettest-ssh", STORED):
            assert secret not in seen


@pytest.mark.parametrize("workers", ["1", "2"])
async def test_a_command_inherits_no_descriptor_beyond_the_standard_three(
    workers: str, tmp_path: Path
) -> None:
    shell = ("call_fds", "run_shell_command", {"command": "ls /proc/$$/fd"})
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.calls_turn(KIND, [shell])), sc.ok(sc.text_turn(KIND, "Seen.")))
        command, env = _agent(server, workers)
        client = RecordingClient()
        async with running_agent(command, env, client) as (conn, _):
            session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("fds")])
        assert reply.stop_reason == "end_turn"
    seen = json.dumps(server.requests[1].body)
    # What the shell running the command holds: nothing of the agent's (its store, its pipes).
    assert '"content": "0\\n1\\n2\\n[exit code 0]"' in seen, seen
