"""What keeping sessions costs: SQLite writes per turn, and loading a long session.

One session is driven through ``StoreJournal`` exactly as the emitter drives
it (each frame recorded, each card's terminal update and each turn end
handed to the journal's writer), for ``--turns`` turns of a typical shape
(one tool call with its three card frames, a dozen message chunks, four
history entries). The emitter pays only the hand-over and the writer thread
the SQLite writes, so both are printed per turn (mean, p50, p99): the
emitter's cost as it grows, with the same frames' ``orjson.dumps`` alone as
a baseline, and the time from hand-over until written (one turn at a time).
Then a second session's turns are handed over back to back, as many busy
sessions would, to show the writer's throughput. Last, the database size per
turn and the time to ``load`` the whole session (the ``session/load`` target
is < 200 ms for 500 turns).

All of it runs once per durability level (``--synchronous normal`` and
``full``, each on a fresh file in the same run), and the writer's cost per
turn at ``full`` is printed as a ratio of ``normal``'s: what the fsync at
each commit costs on this disk. ``--dir`` puts the files on the disk to
measure (default: the temporary directory).

    .venv/bin/python -m benchmarks.store [--turns 500] [--loads 5] [--dir DIR]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from toolprep.messages import frames as fr
from toolprep.messages.content import (
    Content,
    FunctionCall,
    FunctionCallPart,
    FunctionResponse,
    FunctionResponsePart,
    TextPart,
)
from toolprep.runtime.store import SessionStore
from toolprep.runtime.store.connection import SYNCHRONOUS_LEVELS, Synchronous
from toolprep.runtime.store.journal import StoreJournal

TARGET_LOAD_MS = 200.0


def turn_frames(n: int) -> list[dict[str, Any]]:
    call = f"call_{n}"
    frames = [
        fr.preparing(call, "read_file", "read"),
        fr.execution_started(
            call,
            "read_file",
            title=f"Read src/module_{n}.py",
            kind="read",
            locations=[{"path": f"/project/src/module_{n}.py"}],
            raw_input={"path": f"src/module_{n}.py"},
            prepared=True,
        ),
        fr.tool_result(
            call,
            "read_file",
            ok=True,
            content=[fr.text_content("def f():\n    return 1\n" * 20)],
            raw_output={"lines": 40},
        ),
    ]
    frames += [fr.agent_message_chunk(f"word{i} ") for i in range(12)]
    return frames


def turn_history(n: int) -> list[Content]:
    call = f"call_{n}"
    return [
        Content("user", (TextPart(f"Please look at module {n} and explain it."),)),
        Content(
            "model",
            (FunctionCallPart(FunctionCall(call, "read_file", {"path": f"src/module_{n}.py"})),),
        ),
        Content(
            "user",
            (
                FunctionResponsePart(
                    FunctionResponse(call, "read_file", {"output": "def f(): ...\n" * 20})
                ),
            ),
        ),
        Content("model", (TextPart("It defines f, which returns 1. " * 4),)),
    ]


def record_turn(
    journal: StoreJournal,
    session_id: str,
    frames: list[dict[str, Any]],
    history: tuple[Content, ...],
) -> None:
    """What the emitter does for one turn."""
    for frame in frames:
        journal.record(session_id, frame)
    journal.turn_ended(session_id, history)


@dataclass(frozen=True, slots=True)
class Figures:
    journal_ms: list[float]
    written_ms: list[float]
    baseline_ms: list[float]
    burst_handed_ms: float
    burst_written_ms: float
    loads: list[float]
    size: int


def measure(turns: int, loads: int, synchronous: Synchronous, where: str | None) -> Figures:
    """One run of the whole benchmark on a fresh file at the ``synchronous`` level."""
    with tempfile.TemporaryDirectory(prefix="toolprep-store-", dir=where) as tmp:
        db = Path(tmp) / "sessions.db"
        with SessionStore(db, synchronous=synchronous) as store:
            journal = StoreJournal(store)
            store.sessions.create("sess_bench", "/work", "bench")
            store.sessions.create("sess_burst", "/work", "bench")
            history: list[Content] = []
            journal_ms: list[float] = []
            written_ms: list[float] = []
            baseline_ms: list[float] = []
            for n in range(turns):
                frames = turn_frames(n)
                history.extend(turn_history(n))
                snapshot = tuple(history)
                t0 = time.perf_counter()
                record_turn(journal, "sess_bench", frames, snapshot)
                t1 = time.perf_counter()
                journal.flush()
                t2 = time.perf_counter()
                for frame in frames:
                    orjson.dumps(frame)
                t3 = time.perf_counter()
                journal_ms.append((t1 - t0) * 1000)
                written_ms.append((t2 - t0) * 1000)
                baseline_ms.append((t3 - t2) * 1000)
            burst = [(turn_frames(n), tuple(history[: 4 * (n + 1)])) for n in range(turns)]
            t0 = time.perf_counter()
            for frames, snapshot in burst:
                record_turn(journal, "sess_burst", frames, snapshot)
            t1 = time.perf_counter()
            drained = journal.close()
            t2 = time.perf_counter()
            load_ms = []
            for _ in range(loads):
                t3 = time.perf_counter()
                loaded = store.sessions.load("sess_bench")
                load_ms.append((time.perf_counter() - t3) * 1000)
            assert drained and len(loaded.history) == 4 * turns
            assert len(loaded.frames) == len(turn_frames(0)) * turns
        size = sum(p.stat().st_size for p in Path(tmp).iterdir())
    return Figures(
        journal_ms,
        written_ms,
        baseline_ms,
        (t1 - t0) * 1000,
        (t2 - t0) * 1000,
        load_ms,
        size,
    )


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"mean {statistics.fmean(values):.2f} / p50 {statistics.median(values):.2f} "
        f"/ p99 {p99:.2f} ms"
    )


def report(turns: int, level: Synchronous, figures: Figures) -> None:
    tenth = max(1, turns // 10)
    print(f"--- synchronous {level} ---")
    print(f"emitter thread per turn (record every frame + turn end): {summary(figures.journal_ms)}")
    print(f"  first {tenth} turns: {summary(figures.journal_ms[:tenth])}")
    print(f"  last {tenth} turns:  {summary(figures.journal_ms[-tenth:])}")
    print(f"baseline, orjson.dumps of the same frames: {summary(figures.baseline_ms)}")
    ratio = statistics.fmean(figures.journal_ms) / max(statistics.fmean(figures.baseline_ms), 1e-9)
    print(f"emitter thread / baseline: {ratio:.0f}x")
    print(f"writer, handed over until written, per turn: {summary(figures.written_ms)}")
    print(f"  first {tenth} turns: {summary(figures.written_ms[:tenth])}")
    print(f"  last {tenth} turns:  {summary(figures.written_ms[-tenth:])}")
    print(
        f"{turns} turns handed over back to back: {figures.burst_handed_ms:.1f} ms on the "
        f"emitter thread, all written after {figures.burst_written_ms:.1f} ms "
        f"({figures.burst_written_ms / turns:.2f} ms per turn)"
    )
    per_turn = figures.size / (2 * turns) / 1024  # both sessions
    print(f"database size: {figures.size / 1024:.0f} KiB ({per_turn:.1f} KiB per turn)")
    verdict = "PASS" if max(figures.loads) < TARGET_LOAD_MS else "MISS"
    print(
        f"{verdict}  load of the {turns}-turn session: {summary(figures.loads)} "
        f"(target < {TARGET_LOAD_MS:.0f} ms)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where the files go (default: tmp)")
    args = parser.parse_args(argv)
    print(f"{args.turns} turns, {len(turn_frames(0))} frames and 4 history entries per turn")
    runs = {level: measure(args.turns, args.loads, level, args.dir) for level in SYNCHRONOUS_LEVELS}
    for level, figures in runs.items():
        report(args.turns, level, figures)
    normal, full = runs["normal"], runs["full"]
    per_turn = statistics.fmean(full.written_ms) / statistics.fmean(normal.written_ms)
    p50 = statistics.median(full.written_ms) / statistics.median(normal.written_ms)
    burst = full.burst_written_ms / normal.burst_written_ms
    print("--- full / normal ---")
    print(f"writer per turn, handed over until written: {per_turn:.1f}x mean, {p50:.1f}x p50")
    print(f"{args.turns} turns back to back, until all written: {burst:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
