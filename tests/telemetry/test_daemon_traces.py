"""``toolprep serve`` with workers: the turn's spans come from the worker that ran it, in the
caller's trace, each process exports under its own resource, and a worker killed under the
daemon is a span of the front's.

The editor's ``traceparent`` reaches the front in the prompt's ``_meta``, crosses to the
worker with the prompt, and the worker's ``invoke_agent`` span hangs under it. Every
process exports to the same collector (a loopback OTLP receiver decoding the protobuf),
saying which process it is.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.daemon.telemetry_daemon import NOTES_PROMPT, README_PROMPT, replay_daemon
from tests.support.otlp_receiver import OtlpReceiver, ReceivedPoint, ReceivedSpan
from tests.support.processes import worker_pids_of
from tests.support.ws_client import WsClient

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"


def _turns(spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
    return [s for s in spans if s.name == "invoke_agent toolprep"]


def test_the_workers_spans_join_the_callers_trace(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        daemon = replay_daemon(
            tmp_path,
            "--workers",
            "2",
            env_extra={
                "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
                "OTEL_BSP_SCHEDULE_DELAY": "100",
                "OTEL_METRIC_EXPORT_INTERVAL": "200",
            },
        )
        cwd = tmp_path / "project"
        cwd.mkdir()
        (cwd / "README.md").write_text("# A project\n\nSomething to read.\n")
        client = WsClient(daemon.url, daemon.token)
        try:
            session_id = client.start_session(cwd)
            for prompt, meta in (
                (README_PROMPT, {"traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01"}),
                (NOTES_PROMPT, {}),
            ):
                params = {
                    "sessionId": session_id,
                    "prompt": [{"type": "text", "text": prompt}],
                    "_meta": meta,
                }
                answer = client.result(client.request("session/prompt", params), timeout=120)
                assert answer["stopReason"] == "end_turn"
            receiver.wait_for_spans(lambda got: len(_turns(got)) == 2)
            os.kill(worker_pids_of(daemon.process.pid)[0], signal.SIGKILL)
            spans = receiver.wait_for_spans(
                lambda got: any(s.name == "worker.restart" for s in got)
            )

            def daemon_exported(points: list[ReceivedPoint]) -> bool:
                return any(p.metric == "toolprep.sessions.live" for p in points)

            points = receiver.wait_for_points(daemon_exported)
        finally:
            client.close()
            try:
                assert daemon.stop() == 0
            finally:
                daemon.kill()

    first, second = sorted(_turns(spans), key=lambda s: s.start_ns)
    assert (first.trace_id, first.parent_span_id) == (TRACE_ID, CALLER_SPAN)
    assert second.trace_id != TRACE_ID
    worker = first.resource
    assert worker["toolprep.process.role"] == "worker"
    assert worker["service.name"] == "toolprep"
    # The retry of the second turn: its card discarded, under that turn.
    (discarded,) = [
        s
        for s in spans
        if s.parent_span_id == second.span_id
        and s.attributes.get("toolprep.tool.outcome") == "discarded"
    ]
    assert discarded.attributes["toolprep.discard_reason"] == "retry"
    # The front exports its own readings, as the daemon; the worker its turns' instruments.
    roles = {p.metric: p.resource["toolprep.process.role"] for p in points}
    assert roles["toolprep.sessions.live"] == "daemon"
    assert roles["toolprep.turns"] == "daemon"
    pids = {p.resource["process.pid"] for p in points} | {worker["process.pid"]}
    assert len(pids) >= 2
    # A worker killed under the daemon is a span of the front's.
    (restart,) = [s for s in spans if s.name == "worker.restart"]
    assert restart.resource["toolprep.process.role"] == "daemon"
    assert "signal 9" in str(restart.attributes["toolprep.worker.exit"])
