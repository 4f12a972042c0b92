"""A collector that is down never slows or breaks a turn.

OTLP export is pointed at a loopback port that refuses connections, exporting every
50 ms; the daemon's export attempts fail (the SDK says so in the log) while a whole turn
runs to its end, the turn is still counted on ``/metrics``, and the daemon stops cleanly.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

from tests.daemon.telemetry_daemon import get, http_base, logged, one_turn, replay_daemon, sample


def test_a_turn_ends_normally_while_otlp_export_fails(tmp_path: Path) -> None:
    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        daemon = replay_daemon(
            tmp_path,
            "--workers",
            "1",
            env_extra={
                "OTEL_METRICS_EXPORTER": "otlp",
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
                "OTEL_METRIC_EXPORT_INTERVAL": "50",
            },
        )
        try:
            assert one_turn(daemon, tmp_path / "project") == "end_turn"
            # The export was really tried, and failed, at that port.
            logged(daemon, re.compile(rf"metric_exporter: .*port={port}\).*/v1/metrics"))
            assert one_turn(daemon, tmp_path / "again") == "end_turn"
            scraped = get(
                http_base(daemon) + "/metrics", {"Authorization": f"Bearer {daemon.token}"}
            )
            assert sample(scraped.body, "toolprep_turns_total") == 2
        finally:
            try:
                assert daemon.stop() == 0
            finally:
                daemon.kill()
