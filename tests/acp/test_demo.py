"""``toolprep demo`` is the main job on the embedded default: it must show the lifecycle."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from tests.support.acp_schema import validate_agent_message
from tests.support.agent_process import REPO
from tests.support.runtime_harness import check_cards, lifecycle


def test_demo_json_shows_preparing_retry_discard_and_cancel() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "toolprep.runtime.cli", "demo", "--json"],
        cwd=REPO,
        capture_output=True,
        timeout=120,
        check=True,
    )
    messages = [orjson.loads(line) for line in done.stdout.splitlines()]
    for message in messages:
        validate_agent_message(message)
    frames = [m["params"]["update"] for m in messages]
    check_cards(frames)
    cards = lifecycle(frames)
    assert ["preparing", "in_progress", "completed"] in cards.values()
    assert (
        sum(labels == ["preparing", "discarded"] for labels in cards.values()) == 2
    )  # retry + cancel


@pytest.fixture(scope="module")
def demo_output() -> str:
    """What ``toolprep demo`` prints, run once for the tests that read it."""
    done = subprocess.run(
        [sys.executable, "-m", "toolprep.runtime.cli", "demo"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


def test_demo_timeline_is_readable(demo_output: str) -> None:
    out = demo_output
    assert "preparing" in out and "discarded" in out and "stopReason=cancelled" in out
    assert out.count("stopReason=end_turn") == 2


def test_demo_explains_its_columns_and_the_early_card(demo_output: str) -> None:
    legend, _, timeline = demo_output.partition("    time  frame")
    for column in ("time", "frame", "toolCallId", "status", "phase", "tool"):
        assert f"\n  {column} " in legend, column
    assert "preparing: the card opened the moment the model named the tool" in legend
    assert "discarded: that attempt was abandoned" in legend
    assert "stopReason=end_turn" in timeline  # the legend comes first, then the timeline
