"""``benchmarks.read_floor`` measures what it says: every configuration really read.

A run that never connected would print a plausible CPU figure over zero
reads, so this runs each configuration briefly and checks that each child
read events on the loop and with the allocator settings it names. No figure
is judged: the machine is shared.
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import read_floor


def test_every_configuration_reads_on_the_loop_and_settings_it_names(tmp_path: Path) -> None:
    report_path = tmp_path / "read_floor.json"

    code = read_floor.main(
        [
            "--connections=10",
            "--rate=50",
            "--duration=0.5",
            "--settle=0.3",
            "--readers=protocol,sdk",
            f"--report={report_path}",
        ]
    )

    assert code == 0
    runs = json.loads(report_path.read_text(encoding="utf-8"))["runs"]
    assert {(r["reader"], r["loop"], r["malloc"]) for r in runs} == {
        (reader, loop, malloc)
        for reader in ("protocol", "sdk")
        for loop in ("asyncio", "uvloop")
        for malloc in ("default", "tuned")
    }
    for run in runs:
        assert run["reads_per_s"] > 0, run
        assert run["us_per_read"] > 0, run
        assert run["event_loop"] == run["loop"], run
        assert run["malloc_tuned"] is (run["malloc"] == "tuned"), run
