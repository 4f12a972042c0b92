"""The span tree of a turn, as a collector receives it from ``toolprep acp`` over OTLP/HTTP.

One agent, two turns, every way an attempt can end that a user lives through: a card shown
then a failed stream (retried), the same again (the retries spent: the fallback model), a
call the user allows, then an answer; and a second turn the user cancels while its card is
still preparing. The agent's own exporters (the SDK's OTLP/HTTP ones) send to a loopback
receiver that decodes the protobuf, so what is checked is what Jaeger or Tempo would show.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runtime import scenarios as sc
from tests.support.agent_process import AgentProcess, agent_command
from tests.support.otlp_receiver import OtlpReceiver, ReceivedPoint, ReceivedSpan
from toolprep.testing import FakeProviderServer

KIND = "anthropic"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"
SECRET_COMMAND = "echo unmistakable-argument"


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OtlpReceiver]:
    """The receiver, once the agent ran both turns and exited (its exporters flushed)."""
    tmp_path = tmp_path_factory.mktemp("traces")
    with OtlpReceiver() as receiver, FakeProviderServer() as server:
        server.enqueue(
            sc.prepared_then_error(KIND, sc.shell("echo one", "call_retried")),
            sc.prepared_then_error(KIND, sc.shell("echo two", "call_fell_back")),
            sc.ok(sc.calls_turn(KIND, [sc.shell(SECRET_COMMAND, "call_allowed")])),
            sc.ok(sc.text_turn(KIND, "Done.")),
            sc.prepared_then_stall(KIND, sc.shell("sleep 5", "call_cancelled")),
        )
        command, env = agent_command(
            KIND,
            server,
            "--model",
            "first-model",
            "--fallback-model",
            "second-model",
            "--max-retries",
            "1",
            "--max-retry-wait",
            "0.01",
        )
        env.update(
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
                "OTEL_BSP_SCHEDULE_DELAY": "100",
                "OTEL_METRIC_EXPORT_INTERVAL": "200",
                "OTEL_SERVICE_NAME": "toolprep-under-test",
            }
        )
        agent = AgentProcess(command, env, tmp_path, tmp_path / "agent.log")
        try:
            _run_both_turns(agent, tmp_path)
            assert agent.close() == 0, agent.stderr()
        finally:
            agent.kill()
        yield receiver


def _run_both_turns(agent: AgentProcess, cwd: Path) -> None:
    session = agent.start_session(cwd)
    first = agent.request(
        "session/prompt",
        {
            "sessionId": session,
            "prompt": [{"type": "text", "text": "go"}],
            "_meta": {"traceparent": TRACEPARENT},
        },
    )
    agent.wait_for(lambda _: bool(agent.requests("session/request_permission")))
    agent.answer_permission(agent.requests("session/request_permission")[0])
    assert agent.result(first)["stopReason"] == "end_turn"
    second = agent.prompt(session)
    agent.wait_for(
        lambda _: any(u.get("toolCallId") == "call_cancelled" for u in agent.updates(session))
    )
    agent.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}})
    assert agent.result(second)["stopReason"] == "cancelled"


def _all_ended(spans: list[ReceivedSpan]) -> bool:
    turns = [s for s in spans if s.name == "invoke_agent toolprep"]
    return len(turns) == 2 and sum(s.name.startswith("execute_tool") for s in spans) == 4


def _spans(receiver: OtlpReceiver) -> list[ReceivedSpan]:
    return sorted(receiver.wait_for_spans(_all_ended), key=lambda s: s.start_ns)


def _children(spans: list[ReceivedSpan], parent: ReceivedSpan, prefix: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.parent_span_id == parent.span_id and s.name.startswith(prefix)]


def _turns(spans: list[ReceivedSpan]) -> tuple[ReceivedSpan, ReceivedSpan]:
    first, second = (s for s in spans if s.name == "invoke_agent toolprep")
    return first, second


def test_the_turn_hangs_under_the_callers_traceparent(exported: OtlpReceiver) -> None:
    first, second = _turns(_spans(exported))
    assert (first.trace_id, first.parent_span_id) == (TRACE_ID, CALLER_SPAN)
    assert first.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert first.attributes["toolprep.turn.stop_reason"] == "end_turn"
    assert first.resource["service.name"] == "toolprep-under-test"
    # A prompt that carried no trace context starts a trace of its own.
    assert second.trace_id != TRACE_ID and second.parent_span_id == ""
    assert second.attributes["toolprep.turn.stop_reason"] == "cancelled"


def test_each_attempt_is_a_chat_span_saying_how_it_ended(exported: OtlpReceiver) -> None:
    spans = _spans(exported)
    first, second = _turns(spans)
    attempts = [
        (
            s.attributes["gen_ai.request.model"],
            s.attributes["toolprep.attempt.retry"],
            s.attributes["toolprep.attempt.fallback"],
            s.attributes["toolprep.attempt.outcome"],
        )
        for s in _children(spans, first, "chat ")
    ]
    assert attempts == [
        ("first-model", 0, False, "retry"),
        ("first-model", 1, False, "model_fallback"),
        ("second-model", 0, True, "succeeded"),
        ("second-model", 0, True, "succeeded"),
    ]
    answered = _children(spans, first, "chat ")[-1]
    assert answered.name == "chat second-model"
    assert answered.attributes["gen_ai.usage.output_tokens"] > 0  # type: ignore[operator]
    assert any(e.name == "first_chunk" for e in answered.events)
    (cancelled,) = _children(spans, second, "chat ")
    assert cancelled.attributes["toolprep.attempt.outcome"] == "cancel"


def test_each_card_is_an_execute_tool_span_with_its_life_as_events(
    exported: OtlpReceiver,
) -> None:
    spans = _spans(exported)
    first, second = _turns(spans)
    cards = {
        s.attributes["gen_ai.tool.call.id"]: s
        for s in [
            *_children(spans, first, "execute_tool"),
            *_children(spans, second, "execute_tool"),
        ]
    }
    assert set(cards) == {"call_retried", "call_fell_back", "call_allowed", "call_cancelled"}
    for call_id, reason in (
        ("call_retried", "retry"),
        ("call_fell_back", "model_fallback"),
        ("call_cancelled", "cancel"),
    ):
        card = cards[call_id]
        assert card.name == "execute_tool run_shell_command"
        assert [e.name for e in card.events] == ["card.preparing_shown", "card.discarded"]
        assert card.events[1].attributes == {"toolprep.discard_reason": reason}
        assert card.attributes["toolprep.tool.outcome"] == "discarded"
    allowed = cards["call_allowed"]
    assert [e.name for e in allowed.events] == [
        "card.preparing_shown",
        "card.arguments_complete",
        "permission.asked",
        "permission.answered",
        "card.running",
    ]
    assert allowed.events[3].attributes == {"toolprep.permission.outcome": "allow_once"}
    assert allowed.attributes["toolprep.tool.outcome"] == "completed"
    # The span starts when the chunk naming the tool was read, before its card was shown.
    assert allowed.start_ns <= allowed.events[0].time_ns


def test_no_prompt_or_argument_reaches_the_collector(exported: OtlpReceiver) -> None:
    recorded = repr([(s.attributes, [e.attributes for e in s.events]) for s in _spans(exported)])
    assert "unmistakable-argument" not in recorded
    assert "echo" not in recorded


def _sum(points: list[ReceivedPoint], metric: str, **labels: str) -> float:
    matching = [
        p
        for p in points
        if p.metric == metric and all(p.attributes.get(k) == v for k, v in labels.items())
    ]
    return max((p.value or 0.0 for p in matching), default=0.0)


def test_the_metrics_count_the_turns_attempts_and_discards(exported: OtlpReceiver) -> None:
    def counted(points: list[ReceivedPoint]) -> bool:
        return _sum(points, "toolprep.turns", stop_reason="cancelled") == 1

    points = exported.wait_for_points(counted)
    assert _sum(points, "toolprep.turns", stop_reason="end_turn") == 1
    for reason in ("retry", "model_fallback", "cancel"):
        assert _sum(points, "toolprep.cards.discarded", **{"toolprep.discard_reason": reason}) == 1
    assert (
        _sum(
            points,
            "toolprep.attempts",
            **{"gen_ai.request.model": "second-model", "toolprep.attempt.outcome": "succeeded"},
        )
        == 2
    )
    latency = [p for p in points if p.metric == "toolprep.card.preparing.latency"]
    assert latency and all(p.count for p in latency)
