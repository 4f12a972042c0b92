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

    .venv/bin/python -m benchmarks.store [--turns 500] [--loads 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
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
            locations=[{"path": f"/work/src/module_{n}.py"}],
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--loads", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="toolprep-store-") as tmp:
        db = Path(tmp) / "sessions.db"
        with SessionStore(db) as store:
            journal = StoreJournal(store)
            store.create("sess_bench", "/work", "bench")
            store.create("sess_burst", "/work", "bench")
            history: list[Content] = []
            journal_ms: list[float] = []
            written_ms: list[float] = []
            baseline_ms: list[float] = []
            for n in range(args.turns):
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
            burst = [(turn_frames(n), tuple(history[: 4 * (n + 1)])) for n in range(args.turns)]
            t0 = time.perf_counter()
            for frames, snapshot in burst:
                record_turn(journal, "sess_burst", frames, snapshot)
            t1 = time.perf_counter()
            drained = journal.close()
            t2 = time.perf_counter()
            burst_handed_ms, burst_written_ms = (t1 - t0) * 1000, (t2 - t0) * 1000
            loads = []
            for _ in range(args.loads):
                t0 = time.perf_counter()
                loaded = store.load("sess_bench")
                loads.append((time.perf_counter() - t0) * 1000)
            assert drained and len(loaded.history) == 4 * args.turns
            assert len(loaded.frames) == len(turn_frames(0)) * args.turns
        size = sum(p.stat().st_size for p in Path(tmp).iterdir())

    def summary(values: list[float]) -> str:
        ordered = sorted(values)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        return (
            f"mean {statistics.fmean(values):.2f} / p50 {statistics.median(values):.2f} "
            f"/ p99 {p99:.2f} ms"
        )

    tenth = max(1, args.turns // 10)
    print(f"{args.turns} turns, {len(turn_frames(0))} frames and 4 history entries per turn")
    print(f"emitter thread per turn (record every frame + turn end): {summary(journal_ms)}")
    print(f"  first {tenth} turns: {summary(journal_ms[:tenth])}")
    print(f"  last {tenth} turns:  {summary(journal_ms[-tenth:])}")
    print(f"baseline, orjson.dumps of the same frames: {summary(baseline_ms)}")
    ratio = statistics.fmean(journal_ms) / max(statistics.fmean(baseline_ms), 1e-9)
    print(f"emitter thread / baseline: {ratio:.0f}x")
    print(f"writer, handed over until written, per turn: {summary(written_ms)}")
    print(f"  first {tenth} turns: {summary(written_ms[:tenth])}")
    print(f"  last {tenth} turns:  {summary(written_ms[-tenth:])}")
    print(
        f"{args.turns} turns handed over back to back: {burst_handed_ms:.1f} ms on the emitter "
        f"thread, all written after {burst_written_ms:.1f} ms "
        f"({burst_written_ms / args.turns:.2f} ms per turn)"
    )
    per_turn = size / (2 * args.turns) / 1024  # both sessions
    print(f"database size: {size / 1024:.0f} KiB ({per_turn:.1f} KiB per turn)")
    verdict = "PASS" if max(loads) < TARGET_LOAD_MS else "MISS"
    print(
        f"{verdict}  load of the {args.turns}-turn session: {summary(loads)} "
        f"(target < {TARGET_LOAD_MS:.0f} ms)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
