"""The ``process`` tier: marked without anyone remembering, and guarded in the fast tier.

Each test runs pytest on a small suite of its own, in a process of its own
(the guard's audit hook stays in the process that installs it), with the
plugin ``tests.support.tiers`` loaded as this suite's conftest loads it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

CONFTEST = 'pytest_plugins = ["tests.support.tiers"]\n'

SPAWNING_SUITE = """
import os
import subprocess
import sys

import pytest


def run_true():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


class Helper:
    def go(self):
        run_true()


@pytest.fixture
def started():
    run_true()


def test_in_process_only():
    assert sum(range(4)) == 6


def test_calls_a_helper():
    run_true()


def test_through_a_class():
    Helper().go()


def test_through_a_fixture(started):
    pass


def test_calls_subprocess_directly():
    subprocess.run(["true"], check=True)


@pytest.mark.process
def test_marked_by_hand():
    os.system("true")
"""

HIDDEN_SPAWN = """
import os


def test_starts_a_shell_no_name_shows():
    assert os.system("true") == 0


def test_in_process_only():
    assert os.getpid() > 0
"""


def run_pytest(folder: Path, *options: str) -> str:
    """pytest on ``folder``'s suite in a fresh interpreter; what it printed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(folder)])}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *options],
        capture_output=True,
        cwd=folder,
        env=env,
        text=True,
        timeout=300,
    )
    return done.stdout + done.stderr


def write_suite(folder: Path, tests: str) -> Path:
    (folder / "conftest.py").write_text(CONFTEST)
    (folder / "test_suite.py").write_text(tests)
    return folder


def test_tests_that_reach_a_process_start_are_marked(tmp_path: Path) -> None:
    folder = write_suite(tmp_path, SPAWNING_SUITE)
    fast = run_pytest(folder, "-m", "not process")
    assert re.search(r"\b1 passed, 5 deselected\b", fast), fast
    assert "PASSED test_suite.py::test_in_process_only" in fast, fast
    slow = run_pytest(folder, "-m", "process")
    assert re.search(r"\b5 passed, 1 deselected\b", slow), slow
    for name in (
        "test_calls_a_helper",
        "test_through_a_class",
        "test_through_a_fixture",
        "test_calls_subprocess_directly",
        "test_marked_by_hand",
    ):
        assert f"PASSED test_suite.py::{name}" in slow, slow


def test_the_fast_tier_fails_a_test_that_starts_a_process_unmarked(tmp_path: Path) -> None:
    folder = write_suite(tmp_path, HIDDEN_SPAWN)
    fast = run_pytest(folder, "-m", "not process")
    assert re.search(r"\b1 failed, 1 passed\b", fast), fast
    assert (
        "test_suite.py::test_starts_a_shell_no_name_shows started a process "
        "but is not marked 'process'" in fast
    ), fast
    assert "os.system: 'true'" in fast, fast
    assert 'assert os.system("true") == 0' in fast, fast  # where it was started
    # The whole suite runs both: the guard watches only the fast tier.
    everything = run_pytest(folder)
    assert re.search(r"\b2 passed\b", everything), everything
