"""Provider credentials never reach a shell command, seen over real stdio.

The agent starts with a key in its environment; the model runs ``env``; what
goes back to the provider and to the editor must hold neither the secret
values nor the names of the variables that were kept out.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from acp import text_block

from tests.runtime import scenarios as sc
from tests.support.agent_process import RecordingClient, agent_command, running_agent
from tests.support.runtime_harness import lifecycle
from toolprep.testing import FakeProviderServer

ANTHROPIC_KEY = "sk-ant-scrubtest-4b1f9e27c3d85a60"
OPENAI_KEY = "sk-openai-scrubtest-91d0c7e4a2b3"
AUTH_TOKEN = "auth-token-scrubtest-5e8a1f3c"
OTHER_KEY = "github-scrubtest-0a7d2c9e41"
USER_SECRET_A = "user-secret-a-scrubtest-73c1"
USER_SECRET_B = "user-secret-b-scrubtest-28fe"
KEPT = "kept-value-scrubtest-visible"

SECRET_VALUES = (ANTHROPIC_KEY, OPENAI_KEY, AUTH_TOKEN, OTHER_KEY, USER_SECRET_A, USER_SECRET_B)
SCRUBBED_NAMES = (
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "GITHUB_API_KEY",
    "COPY_OF_THE_KEY",
    "MY_SECRET_A",
    "MY_SECRET_B",
    "TOOLPREP_SCRUB_ENV",
)


def _everything_the_editor_saw(client: RecordingClient) -> str:
    return json.dumps(client.frames())


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_env_shows_no_provider_key_to_model_or_editor(kind: str, tmp_path: Path) -> None:
    shell = ("call_env", "run_shell_command", {"command": "env"})
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.calls_turn(kind, [shell])), sc.ok(sc.text_turn(kind, "Seen.")))
        command, env = agent_command(kind, server, "--scrub-env", "MY_SECRET_A")
        env |= {
            "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
            "OPENAI_API_KEY": OPENAI_KEY,
            "ANTHROPIC_AUTH_TOKEN": AUTH_TOKEN,
            "GITHUB_API_KEY": OTHER_KEY,
            # The configured key under a name no rule knows: caught by its value.
            "COPY_OF_THE_KEY": ANTHROPIC_KEY if kind == "anthropic" else OPENAI_KEY,
            "MY_SECRET_A": USER_SECRET_A,
            "MY_SECRET_B": USER_SECRET_B,
            "TOOLPREP_SCRUB_ENV": "MY_SECRET_B",
            "KEPT_VARIABLE": KEPT,
        }
        client = RecordingClient()
        async with running_agent(command, env, client) as (conn, _):
            session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("env?")])
        assert reply.stop_reason == "end_turn"
        assert lifecycle(client.frames()) == {"call_env": ["preparing", "in_progress", "completed"]}
        # The provider really was called with the key, so the agent held it.
        configured = ANTHROPIC_KEY if kind == "anthropic" else OPENAI_KEY
        assert configured in str(server.requests[0].headers)
        to_model = json.dumps(server.requests[1].body)
        to_editor = _everything_the_editor_saw(client)
        for seen_by in (to_model, to_editor):
            assert f"KEPT_VARIABLE={KEPT}" in seen_by  # env ran and its output came back
            for secret in SECRET_VALUES:
                assert secret not in seen_by
            for name in SCRUBBED_NAMES:
                assert name not in seen_by
