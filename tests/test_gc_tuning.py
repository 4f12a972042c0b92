"""The agent's start-up GC tuning, checked in a fresh interpreter (it changes process state)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from toolprep.runtime.process.gc_tuning import GEN0_THRESHOLD, GEN1_THRESHOLD, GEN2_THRESHOLD

_PROBE = textwrap.dedent(
    """
    import gc, json
    from toolprep.runtime.process.gc_tuning import tune_gc_for_daemon

    before = {"threshold": gc.get_threshold(), "frozen": gc.get_freeze_count()}
    tune_gc_for_daemon()
    after = {"threshold": gc.get_threshold(), "frozen": gc.get_freeze_count()}
    print(json.dumps({"before": before, "after": after}))
    """
)


def test_tuning_freezes_start_up_state_and_raises_thresholds() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    probe = json.loads(result.stdout)
    assert probe["before"]["frozen"] == 0
    assert tuple(probe["before"]["threshold"]) != (GEN0_THRESHOLD, GEN1_THRESHOLD, GEN2_THRESHOLD)
    # Every object alive at start-up (modules, classes, functions) is now out of the scans.
    assert probe["after"]["frozen"] > 1000
    assert tuple(probe["after"]["threshold"]) == (GEN0_THRESHOLD, GEN1_THRESHOLD, GEN2_THRESHOLD)
