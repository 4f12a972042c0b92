"""read_file and write_file against a directory symlink flipped in and out of the session dir.

A thread keeps swapping ``cwd/flip`` (atomically, by rename) between a
directory inside the session and one outside it while the real tools go
through it thousands of times. Each call may succeed (it went inside) or be
refused (it met the outside target), but no read may ever return the outside
file and no write may ever land outside. A check-then-open implementation
loses this race hundreds of times in a few thousand tries.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from toolprep.runtime.tools.base import ToolContext, ToolError
from toolprep.runtime.tools.files import ReadFileTool, WriteFileTool

TRIES = 3000
MIN_FLIPS = 100
RACE_DEADLINE_S = 120.0  # generous: a busy machine only makes the race take longer
INSIDE_TEXT = "inside\n"
OUTSIDE_TEXT = "top secret\n"


@dataclass
class Flipper:
    flips: int = 0


@contextmanager
def flipping_link(link: Path, inside: Path, outside: Path) -> Iterator[Flipper]:
    """Swap ``link`` between ``inside`` and ``outside`` as fast as possible until the block ends."""
    stop = threading.Event()
    state = Flipper()
    spare = link.with_name(link.name + ".next")

    def flip() -> None:
        targets = (inside, outside)
        while not stop.is_set():
            with contextlib.suppress(FileNotFoundError):
                spare.unlink()
            spare.symlink_to(targets[state.flips % 2], target_is_directory=True)
            os.replace(spare, link)
            state.flips += 1

    link.symlink_to(inside, target_is_directory=True)
    thread = threading.Thread(target=flip, name="symlink-flipper", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        stop.set()
        thread.join(10)


class Race:
    """Counts the outcomes of the calls made while the link flips.

    The loop goes on past ``TRIES`` until the race has really run (both
    outcomes met, the link flipped ``MIN_FLIPS`` times), however long a busy
    machine makes that take, within a generous deadline.
    """

    def __init__(self, flipper: Flipper) -> None:
        self.flipper = flipper
        self.tries = self.served = self.refused = 0
        self._deadline = time.monotonic() + RACE_DEADLINE_S

    def more(self) -> bool:
        if self.tries >= TRIES and self.served and self.refused and self.flipper.flips > MIN_FLIPS:
            return False
        assert time.monotonic() < self._deadline, (
            f"the race did not run: {self.served} served, {self.refused} refused, "
            f"{self.flipper.flips} flips in {self.tries} tries"
        )
        self.tries += 1
        return True


@pytest.fixture
def race_dirs(cwd: Path, outside: Path) -> tuple[Path, Path]:
    inside = cwd / "real"
    inside.mkdir()
    (inside / "data.txt").write_text(INSIDE_TEXT)
    (outside / "data.txt").write_text(OUTSIDE_TEXT)
    return inside, outside


def test_read_file_never_returns_outside_content(
    cwd: Path, race_dirs: tuple[Path, Path], ctx: ToolContext
) -> None:
    inside, outside = race_dirs
    tool = ReadFileTool()
    leaked = 0
    with flipping_link(cwd / "flip", inside, outside) as flipper:
        race = Race(flipper)  # runs until both targets were met and the link really flipped
        while race.more():
            try:
                text = tool.run({"path": "flip/data.txt"}, ctx).llm_output
            except ToolError:
                race.refused += 1
                continue
            if "secret" in text:
                leaked += 1
            else:
                assert text == INSIDE_TEXT
                race.served += 1
    assert leaked == 0, f"{leaked} of {race.tries} reads returned the outside file"


def test_write_file_never_creates_outside(
    cwd: Path, race_dirs: tuple[Path, Path], ctx: ToolContext
) -> None:
    inside, outside = race_dirs
    tool = WriteFileTool()
    before = sorted(outside.rglob("*"))
    with flipping_link(cwd / "flip", inside, outside) as flipper:
        race = Race(flipper)  # runs until both targets were met and the link really flipped
        while race.more():
            try:
                tool.run({"path": f"flip/deep/n{race.tries}.txt", "content": "written\n"}, ctx)
                race.served += 1
            except ToolError:
                race.refused += 1
    escaped = sorted(set(outside.rglob("*")) - set(before))
    assert escaped == [], f"{len(escaped)} paths created outside: {escaped[:5]}"
    assert (outside / "data.txt").read_text() == OUTSIDE_TEXT
    assert len(list((inside / "deep").iterdir())) == race.served


def test_write_file_never_overwrites_outside(
    cwd: Path, race_dirs: tuple[Path, Path], ctx: ToolContext
) -> None:
    """The old-content read for the diff and the overwrite both stay inside."""
    inside, outside = race_dirs
    tool = WriteFileTool()
    with flipping_link(cwd / "flip", inside, outside):
        for i in range(TRIES):
            try:
                out = tool.run({"path": "flip/data.txt", "content": f"inside {i}\n"}, ctx)
            except ToolError:
                continue
            assert "secret" not in str(out.content)
    assert (outside / "data.txt").read_text() == OUTSIDE_TEXT
