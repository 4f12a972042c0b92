"""``toolprep serve``'s ``/metrics``, ``/healthz`` and ``/readyz``, scraped by a real Prometheus.

The daemon runs two turns on the replay provider (the second retries once, discarding
the card its first attempt showed); a Prometheus server (the distribution's package)
scrapes ``/metrics`` on the ACP address with the bearer token from a credentials file,
and the tokenless ``--metrics-port``, and its query API must return the turns, the
discard, the attempts and tool calls the workers counted, and the live session; a killed
worker is counted as a restart. Without the token ``/metrics``
is refused; the health paths answer without one, and keep the ``Host`` and ``Origin``
checks.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from urllib.parse import urlsplit

from tests.daemon.prometheus_server import ScrapeTarget, prometheus_server
from tests.daemon.telemetry_daemon import (
    NOTES_PROMPT,
    README_PROMPT,
    get,
    http_base,
    metrics_url,
    one_turn,
    replay_daemon,
    sample,
)
from tests.support.eventually import eventually
from tests.support.processes import worker_pids_of
from tests.support.ws_client import WsClient


def test_prometheus_scrapes_the_turn_and_the_live_session(tmp_path: Path) -> None:
    daemon = replay_daemon(tmp_path, "--workers", "2", "--metrics-port", "0")
    cwd = tmp_path / "project"
    cwd.mkdir()
    (cwd / "README.md").write_text("# A project\n\nSomething to read.\n")
    client = WsClient(daemon.url, daemon.token)
    try:
        session_id = client.start_session(cwd)
        for prompt in (README_PROMPT, NOTES_PROMPT):
            result = client.result(client.prompt(session_id, prompt), timeout=120)
            assert result["stopReason"] == "end_turn"
        local = urlsplit(metrics_url(daemon)).netloc
        targets = [
            ScrapeTarget("toolprep", urlsplit(http_base(daemon)).netloc, daemon.token),
            ScrapeTarget("toolprep-local", local),
        ]
        with prometheus_server(tmp_path / "prometheus", targets) as prometheus:
            for job in ("toolprep", "toolprep-local"):
                prometheus.wait_value(f'up{{job="{job}"}}', 1)
                prometheus.wait_value(
                    f'toolprep_turns_total{{job="{job}",stop_reason="end_turn"}}', 2
                )
                # Counted in the worker that ran the session, gathered by the front.
                for promql, value in (
                    (f'toolprep_cards_discarded_total{{job="{job}"}}', 1),
                    (f'toolprep_attempts_total{{job="{job}",toolprep_attempt_outcome="retry"}}', 1),
                    (
                        f'toolprep_attempts_total{{job="{job}",toolprep_attempt_outcome="succeeded"}}',
                        4,
                    ),
                    (
                        f'toolprep_tool_calls_total{{job="{job}",toolprep_tool_outcome="completed"}}',
                        2,
                    ),
                    (f'toolprep_card_preparing_latency_seconds_count{{job="{job}"}}', 3),
                ):
                    prometheus.wait_value(f"sum({promql})", value)
                discard = prometheus.query(f'toolprep_cards_discarded_total{{job="{job}"}}')
                assert discard[0]["metric"]["toolprep_discard_reason"] == "retry"
                # The session stays open while its client is attached.
                prometheus.wait_value(f'toolprep_sessions_live{{job="{job}"}}', 1)
                prometheus.wait_value(f'toolprep_clients_attached{{job="{job}"}}', 1)
                prometheus.wait_value(f'toolprep_connections_open{{job="{job}"}}', 1)
                prometheus.wait_value(f'toolprep_worker_restarts_total{{job="{job}"}}', 0)
    finally:
        client.close()
        try:
            assert daemon.stop() == 0
        finally:
            daemon.kill()


def test_metrics_need_the_token_and_health_needs_none(tmp_path: Path) -> None:
    daemon = replay_daemon(tmp_path, "--workers", "1")
    base = http_base(daemon)
    try:
        refused = get(base + "/metrics")
        assert refused.status == 401, refused
        assert "Authorization: Bearer" in refused.body
        assert get(base + "/metrics", {"Authorization": "Bearer wrong"}).status == 401
        scraped = get(base + "/metrics", {"Authorization": f"Bearer {daemon.token}"})
        assert scraped.status == 200, scraped
        assert scraped.content_type.startswith("text/plain"), scraped.content_type
        assert sample(scraped.body, "toolprep_sessions_live") == 0

        alive = get(base + "/healthz")
        assert (alive.status, alive.body) == (200, "alive\n")
        ready = get(base + "/readyz")
        assert (ready.status, ready.body) == (200, "ready\n")

        # The admission rules of /acp hold here too: no page, no rebound name.
        page = get(base + "/healthz", {"Origin": "https://evil.example"})
        assert page.status == 403, page
        rebound = get(base + "/readyz", {"Host": "evil.example"})
        assert rebound.status == 421, rebound
        assert get(base + "/nowhere").status == 404
    finally:
        try:
            assert daemon.stop() == 0
        finally:
            daemon.kill()


def test_the_metrics_port_serves_only_metrics(tmp_path: Path) -> None:
    daemon = replay_daemon(tmp_path, "--workers", "1", "--metrics-port", "0")
    try:
        url = metrics_url(daemon)
        assert urlsplit(url).hostname == "127.0.0.1"
        scraped = get(url)
        assert scraped.status == 200, scraped
        assert sample(scraped.body, "toolprep_connections_open") == 0
        assert get(url.removesuffix("/metrics") + "/healthz").status == 404
        assert get(url, {"Origin": "https://evil.example"}).status == 403
        assert get(url, {"Host": "evil.example"}).status == 421
    finally:
        try:
            assert daemon.stop() == 0
        finally:
            daemon.kill()


def test_a_killed_worker_is_counted_as_a_restart(tmp_path: Path) -> None:
    daemon = replay_daemon(tmp_path, "--workers", "2")
    base = http_base(daemon)
    token = {"Authorization": f"Bearer {daemon.token}"}
    try:
        assert sample(get(base + "/metrics", token).body, "toolprep_worker_restarts_total") == 0
        workers = worker_pids_of(daemon.process.pid)
        assert len(workers) == 2, workers
        os.kill(workers[0], signal.SIGKILL)
        eventually(
            lambda: (
                sample(get(base + "/metrics", token).body, "toolprep_worker_restarts_total") == 1
            ),
            timeout=60,
            what="the restart counted: ",
        )
        # Replaced: both workers up again, so the daemon is ready.
        eventually(lambda: get(base + "/readyz").status == 200, timeout=60, what="ready: ")
        assert one_turn(daemon, tmp_path / "project") == "end_turn"
    finally:
        try:
            assert daemon.stop() == 0
        finally:
            daemon.kill()
