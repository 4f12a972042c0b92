"""Telemetry off costs nothing, and a daemon without the extra says how to get metrics.

With ``OTEL_SDK_DISABLED=true`` a daemon that runs a whole turn imports no OpenTelemetry
module and not ``prometheus_client`` (``-X importtime`` lists what it imported), and
``/metrics`` answers 503 saying why. Without the ``telemetry`` extra (its package made
unimportable by a shadow on ``PYTHONPATH``, as a missing install would be) the turn runs the
same and ``/metrics`` answers 503 naming the extra to install.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.daemon.telemetry_daemon import get, http_base, one_turn, replay_daemon

OPENTELEMETRY = ("opentelemetry", "prometheus_client")

_IMPORT_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", re.MULTILINE)


def _under(modules: set[str], packages: tuple[str, ...]) -> set[str]:
    return {m for m in modules if any(m == p or m.startswith(p + ".") for p in packages)}


def test_disabled_telemetry_imports_no_opentelemetry(tmp_path: Path) -> None:
    daemon = replay_daemon(
        tmp_path,
        "--workers",
        "1",
        env_extra={"OTEL_SDK_DISABLED": "true"},
        python_options=("-X", "importtime"),
    )
    try:
        assert one_turn(daemon, tmp_path / "project") == "end_turn"
        scraped = get(http_base(daemon) + "/metrics", {"Authorization": f"Bearer {daemon.token}"})
        assert scraped.status == 503, scraped
        assert "OTEL_SDK_DISABLED=true" in scraped.body
        assert get(http_base(daemon) + "/readyz").status == 200
    finally:
        try:
            assert daemon.stop() == 0
        finally:
            daemon.kill()
    imported = set(_IMPORT_LINE.findall(daemon.stderr()))
    # The report covers the turn and the telemetry's own start.
    assert {"toolprep.runtime.daemon.session_pool", "toolprep.runtime.telemetry.setup"} <= imported
    assert _under(imported, OPENTELEMETRY) == set()


def test_without_the_extra_metrics_say_to_install_it(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "opentelemetry"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ImportError(\"No module named 'opentelemetry' (not installed)\")\n"
    )
    daemon = replay_daemon(tmp_path, "--workers", "1", env_extra={"PYTHONPATH": str(shadow.parent)})
    try:
        assert one_turn(daemon, tmp_path / "project") == "end_turn"
        scraped = get(http_base(daemon) + "/metrics", {"Authorization": f"Bearer {daemon.token}"})
        assert scraped.status == 503, scraped
        assert "pip install 'toolprep[telemetry]'" in scraped.body
        # Still behind the token: a stranger learns nothing, not even that.
        assert get(http_base(daemon) + "/metrics").status == 401
    finally:
        try:
            assert daemon.stop() == 0
        finally:
            daemon.kill()
    assert "/metrics serves no metrics" in daemon.stderr()
