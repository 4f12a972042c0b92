"""A provider's retry-after is capped, and the user is told how long the agent waits."""

from __future__ import annotations

import asyncio
import email.utils
import time
from pathlib import Path
from typing import Any

import pytest
from acp import text_block
from freezegun import freeze_time

from tests.runtime import scenarios as sc
from tests.support.agent_process import RecordingClient, agent_command, running_agent
from tests.support.runtime_harness import check_cards, harness
from toolprep.runtime.hosting.model_routes import build_routes, resolve_provider_config
from toolprep.runtime.kernel.retry import DEFAULT_MAX_RETRY_WAIT, RetryPolicy, RetryWait
from toolprep.runtime.providers.anthropic_provider import AnthropicProvider
from toolprep.runtime.providers.deferred import DeferredProvider
from toolprep.runtime.providers.errors import parse_retry_after
from toolprep.runtime.providers.openai_provider import OpenAIProvider
from toolprep.testing import FakeProviderServer, ScriptedResponse

KINDS = ["anthropic", "openai"]


def rate_limited(retry_after: str) -> ScriptedResponse:
    return ScriptedResponse(
        status=429,
        headers={"retry-after": retry_after},
        body={"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}},
    )


def retry_notices(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in frames if "retry" in (f.get("_meta") or {})]


# --- the policy ------------------------------------------------------------------------


def test_default_cap_is_60_seconds_and_says_so() -> None:
    wait = RetryPolicy(jitter=0.0).wait(1, retry_after=3600.0)
    assert DEFAULT_MAX_RETRY_WAIT == 60.0
    assert wait == RetryWait(60.0, 3600.0, capped=True)
    assert wait.describe() == "retrying in 60 s (provider asked for 3600 s; capped)"


def test_retry_after_within_the_cap_is_honoured_and_shown() -> None:
    wait = RetryPolicy(jitter=0.0).wait(1, retry_after=12.0)
    assert wait == RetryWait(12.0, 12.0, capped=False)
    assert wait.describe() == "retrying in 12 s (provider asked for 12 s)"


def test_without_retry_after_only_the_backoff_is_shown() -> None:
    wait = RetryPolicy(base_delay=0.5, jitter=0.0).wait(2)
    assert wait.describe() == "retrying in 1 s"
    assert RetryPolicy(base_delay=0.25, jitter=0.0).wait(1).describe() == "retrying in 0.2 s"


def test_backoff_alone_reaching_the_cap_is_not_called_capped() -> None:
    wait = RetryPolicy(base_delay=10.0, jitter=0.0, max_delay=15.0).wait(3)
    assert wait == RetryWait(15.0, None, capped=False)


def test_notice_is_a_thought_chunk_with_the_figures_in_meta() -> None:
    update = RetryWait(60.0, 3600.0, capped=True).notice("slow down")
    assert update["sessionUpdate"] == "agent_thought_chunk"
    assert update["content"]["text"] == (
        "\n[model request failed: slow down; retrying in 60 s "
        "(provider asked for 3600 s; capped)]\n"
    )
    assert update["_meta"] == {
        "retry": {"waitSeconds": 60.0, "requestedSeconds": 3600.0, "capped": True}
    }


@freeze_time("2030-01-01 12:00:00")
def test_http_date_an_hour_ahead_is_capped_at_the_default() -> None:
    in_an_hour = email.utils.formatdate(time.time() + 3600, usegmt=True)
    requested = parse_retry_after({"retry-after": in_an_hour})
    assert requested == 3600.0
    assert RetryPolicy().wait(1, retry_after=requested).seconds == 60.0


@pytest.mark.parametrize("bad", [-1.0, float("nan")])
def test_max_retry_wait_must_be_a_non_negative_number(bad: float) -> None:
    with pytest.raises(ValueError, match="--max-retry-wait must be >= 0"):
        resolve_provider_config(provider="replay", model=None, max_retry_wait=bad)


# --- through the real runtime ------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_hour_long_retry_after_waits_the_default_cap_and_tells_the_user(
    kind: str, tmp_path: Path
) -> None:
    with harness(kind, tmp_path, retry=RetryPolicy(max_retries=2)) as h:
        h.server.enqueue(rate_limited("3600"))
        waiting, waiting_sink = h.session()
        reply = h.prompt(waiting, waiting_sink)
        waiting_sink.wait_for(lambda frames: bool(retry_notices(frames)))
        (notice,) = retry_notices(waiting_sink.frames(waiting))
        assert notice["content"]["text"] == (
            "\n[model request failed: slow down; retrying in 60 s "
            "(provider asked for 3600 s; capped)]\n"
        )
        assert h.runtime.supervisor_state.delays == [60.0]
        # While that session waits out its minute, another one is served normally.
        h.server.enqueue(sc.ok(sc.text_turn(kind, "meanwhile")))
        other, other_sink = h.session()
        assert h.turn(other, other_sink).stop_reason == "end_turn"
        assert not reply.done()
        h.runtime.cancel(waiting)  # nobody waits a minute in a test
        assert reply.result(timeout=10).stop_reason == "cancelled"
        assert len(h.server.requests) == 2
        check_cards(waiting_sink.frames())


@pytest.mark.parametrize("kind", KINDS)
async def test_cli_cap_shortens_the_wait_and_the_editor_sees_it(kind: str, tmp_path: Path) -> None:
    with FakeProviderServer() as server:
        server.enqueue(rate_limited("3600"), sc.ok(sc.text_turn(kind, "Done.")))
        client = RecordingClient()
        command, env = agent_command(kind, server, "--max-retry-wait", "0.3")
        async with running_agent(command, env, client) as (conn, _):
            session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            reply = await asyncio.wait_for(
                conn.prompt(session_id=session.session_id, prompt=[text_block("go")]), 30
            )
        assert reply.stop_reason == "end_turn"
        (notice,) = retry_notices(client.frames(session.session_id))
        assert notice["sessionUpdate"] == "agent_thought_chunk"
        assert "retrying in 0.3 s (provider asked for 3600 s; capped)" in notice["content"]["text"]
        # One request refused, one retry by the agent: the SDK did not wait out the hour itself.
        assert len(server.requests) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_sdk_clients_of_the_agent_never_retry_on_their_own(kind: str) -> None:
    settings = resolve_provider_config(
        provider=kind, model=None, base_url="http://127.0.0.1:9", max_retries=3
    )
    (route,) = build_routes(settings)
    assert isinstance(route.provider, DeferredProvider)  # built once its SDK is imported
    built = route.provider.resolve(timeout=60)
    assert isinstance(built, AnthropicProvider | OpenAIProvider)
    assert built.client.max_retries == 0
    assert settings.max_retries == 3  # the supervisor's budget, where waits are capped
