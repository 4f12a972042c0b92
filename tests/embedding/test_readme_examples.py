"""The README's "Embed it" examples, run as written: each code block is taken from the
README and run in an interpreter of its own, its Anthropic provider pointed at the loopback
provider through the SDK's own environment variables (``ANTHROPIC_BASE_URL``,
``ANTHROPIC_API_KEY``). An example that no longer runs, or runs without answering, fails.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.runtime import scenarios as sc
from tests.support.agent_process import AgentProcess
from tests.support.runtime_harness import provider_base_url
from toolprep.testing import FakeProviderServer

README = Path(__file__).resolve().parents[2] / "README.md"
DEADLINE_S = 120.0
ANSWER = "Hello from the loopback provider."


def _examples() -> list[str]:
    """The Python code blocks of the README's "Embed it" section, in order."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Embed it\n") :]
    section = section[: section.index("\n## ", 1)]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


def _environment(server: FakeProviderServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL"))}
    env["ANTHROPIC_API_KEY"] = "test-key"
    env["ANTHROPIC_BASE_URL"] = provider_base_url("anthropic", server)
    return env


def test_the_section_has_the_two_examples() -> None:
    examples = _examples()

    assert len(examples) == 2, examples
    assert "runtime.prompt(" in examples[0]
    assert "serve_stdio(" in examples[1]


def test_the_in_process_example_runs_as_written(tmp_path: Path) -> None:
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.text_turn("anthropic", ANSWER)))
        done = subprocess.run(
            [sys.executable, "-c", _examples()[0]],
            cwd=tmp_path,
            env=_environment(server),
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
        )
        asked = len(server.requests)

    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert "agent_message_chunk" in printed, done.stdout
    assert printed[-1] == "end_turn", done.stdout
    assert asked == 1


def test_the_stdio_example_is_an_agent_an_editor_can_use(tmp_path: Path) -> None:
    script = tmp_path / "agent.py"
    script.write_text(_examples()[1], encoding="utf-8")
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.text_turn("anthropic", ANSWER)))
        agent = AgentProcess(
            [sys.executable, str(script)], _environment(server), tmp_path, tmp_path / "err.log"
        )
        try:
            session_id = agent.start_session(tmp_path)
            reply = agent.reply(agent.prompt(session_id, "hi"), timeout=DEADLINE_S)
            said = "".join(
                u["content"]["text"]
                for u in agent.updates(session_id)
                if u["sessionUpdate"] == "agent_message_chunk"
            )
            agent.close_input()
            code = agent.wait_exit(DEADLINE_S)
        finally:
            agent.kill()

    assert reply["result"]["stopReason"] == "end_turn", (reply, agent.stderr())
    assert said == ANSWER
    assert code == 0, agent.stderr()
