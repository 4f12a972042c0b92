"""SSE decoding cost: one huge unterminated line, and ordinary model traffic.

A server that never ends a line used to cost quadratic CPU: every read
re-scanned the whole unfinished line. This prints how the decoder scales
now, as ratios measured in the same run, so the figures mean the same on a
fast or a busy machine:

- ``unterminated N MiB``: a single ``data:`` line of N MiB (1, 10, 80) fed
  in 64 KiB reads, then its line ending. ``x per-MiB`` is the time per MiB
  divided by the time per MiB at 1 MiB: linear decoding stays near 1,
  quadratic decoding grows with N (about 8x at 10 MiB, 80x at 80 MiB).
- ``normal traffic``: a realistic OpenAI stream (text, then tool calls in
  small argument fragments) repeated to 8 MiB, one event per read, the way
  a model streams. Its ``x per-MiB`` compares it with the same 1 MiB
  baseline; it is larger because every event is dispatched.
- ``--reference``: the pre-fix algorithm (join the unfinished line with each
  read and split the whole buffer again) on the same input, up to 10 MiB
  (80 MiB would take about a minute).

The decoder's cap is set above each input, so the cap never fires here.

Run: ``python -m benchmarks.sse_decode [--repeat 3] [--reference]``.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable, Sequence

from tests.support.fake_provider import openai_sse, split_sse_events
from toolprep.runtime.providers.sse import SseDecoder

MIB = 1 << 20
READ_SIZE = 64 * 1024
SIZES_MIB = (1, 10, 80)
REFERENCE_MAX_MIB = 10


def unterminated_reads(size_mib: int) -> list[bytes]:
    """``data: xxx...`` of ``size_mib`` MiB in 64 KiB reads, then the event's end."""
    body = b"data: " + b"x" * (size_mib * MIB - 6)
    reads = [body[i : i + READ_SIZE] for i in range(0, len(body), READ_SIZE)]
    return [*reads, b"\n\n"]


def traffic_reads(total_mib: int) -> list[bytes]:
    """One event per read, from a realistic turn repeated to about ``total_mib`` MiB."""
    turn = openai_sse(
        text="Let me look at the files you mentioned before changing anything. " * 4,
        tool_calls=[
            ("call_a", "read_file", {"path": "src/module.py", "offset": 0, "limit": 400}),
            ("call_b", "search", {"pattern": "def handle_", "path": "src"}),
        ],
        fragment_size=8,
    )
    events = split_sse_events(turn)
    turn_bytes = sum(len(e) for e in events)
    return events * max(1, total_mib * MIB // turn_bytes)


def decode_now(reads: Sequence[bytes]) -> int:
    decoder = SseDecoder(max_event_bytes=sum(len(r) for r in reads) + MIB)
    events = 0
    for read in reads:
        events += len(decoder.feed(read))
    return events + len(decoder.end())


def decode_rescanning(reads: Sequence[bytes]) -> int:
    """The pre-fix line splitting: unfinished line + new read, split again, every read."""
    partial = b""
    lines = 0
    for read in reads:
        buf = partial + read
        split = buf.splitlines()
        partial = b"" if buf.endswith((b"\n", b"\r")) else split.pop()
        lines += len(split)
    return lines


def best_of(repeat: int, decode: Callable[[Sequence[bytes]], int], reads: Sequence[bytes]) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        started = time.process_time()
        decode(reads)
        best = min(best, time.process_time() - started)
    return best


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs (default 3)")
    parser.add_argument(
        "--reference",
        action="store_true",
        help=f"also time the pre-fix algorithm (up to {REFERENCE_MAX_MIB} MiB)",
    )
    args = parser.parse_args(argv)
    print(f"{'input':<24}{'CPU s':>9}{'ms/MiB':>9}{'x per-MiB':>11}")
    baseline: float | None = None
    for size in SIZES_MIB:
        reads = unterminated_reads(size)
        per_mib = best_of(args.repeat, decode_now, reads) / size
        baseline = baseline or per_mib
        label = f"unterminated {size} MiB"
        print(f"{label:<24}{per_mib * size:>9.3f}{per_mib * 1e3:>9.2f}{per_mib / baseline:>11.2f}")
        if args.reference and size <= REFERENCE_MAX_MIB:
            old = best_of(1, decode_rescanning, reads) / size
            label = f"  pre-fix {size} MiB"
            print(f"{label:<24}{old * size:>9.3f}{old * 1e3:>9.2f}{old / baseline:>11.2f}")
    assert baseline is not None
    reads = traffic_reads(8)
    mib = sum(len(r) for r in reads) / MIB
    per_mib = best_of(args.repeat, decode_now, reads) / mib
    label = f"normal traffic {mib:.0f} MiB"
    print(f"{label:<24}{per_mib * mib:>9.3f}{per_mib * 1e3:>9.2f}{per_mib / baseline:>11.2f}")
    print(f"  ({len(reads)} events, {len(reads) / (per_mib * mib):,.0f} events/s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
