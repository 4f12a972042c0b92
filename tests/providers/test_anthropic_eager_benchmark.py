"""``benchmarks.eager_streaming`` measures what it says: each mode chosen by the request itself.

Its paced server picks eager or buffered input from the ``eager_input_streaming``
field of the ``write_file`` declaration it received, as the API does, so a provider
that stopped sending the field (or sent it when switched off) would show up here as
a mode mismatch rather than as two identical-looking rows. One short, fast-paced run;
no figure is judged (the machine is shared).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import eager_streaming


def test_both_modes_are_served_as_requested_and_every_call_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report_path = tmp_path / "eager.json"
    code = eager_streaming.main(
        [
            "--content-kib=1",
            "--token-rate=20000",
            "--turns=2",
            "--warmup=0",
            "--wait-quiet=0",
            f"--report={report_path}",
        ]
    )
    assert code == 0
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert report["stop_reasons"] == {"eager": ["end_turn"] * 2, "buffered": ["end_turn"] * 2}
    for mode in ("eager", "buffered"):
        rows = report["samples"][mode]
        assert len(rows) == 2
        assert all(row["server_mode"] == mode for row in rows), rows
        # Every call ran, its frames in causal order: the card after the response started,
        # in_progress no earlier than preparing (a busy client may read both in one go).
        assert all(row["start_to_preparing_ms"] > 0 for row in rows), rows
        assert all(row["preparing_to_in_progress_ms"] >= 0 for row in rows), rows
    input_tokens = report["config"]["input_tokens"]
    assert {r["input_events"] for r in report["samples"]["eager"]} == {input_tokens}
    assert {r["input_events"] for r in report["samples"]["buffered"]} == {1}
    out = capsys.readouterr().out
    assert "cannot know how the" in out and "buffered / eager" in out
