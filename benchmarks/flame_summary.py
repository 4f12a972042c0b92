"""Summarise a py-spy collapsed-stack profile: where the samples are, by function and thread.

``py-spy record --format raw --threads -o prof.txt --pid PID`` writes one line
per distinct stack, ``frame;frame;...;frame COUNT``. This prints, as shares
of all samples, the functions with the most *own* samples (the frame at the
top of the stack) and the most *inclusive* samples (anywhere on the stack),
and with ``--threads`` data also the share per thread. Idle waits (a thread
blocked in ``select``/``queue.get``/``Condition.wait``...) are counted only if
``--idle`` is given, since py-spy leaves them out by default anyway.

Run: ``python -m benchmarks.flame_summary prof.txt [--top 25] [--match TEXT]``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def _short(frame: str) -> str:
    """``func (path/to/module.py:12)`` -> ``func (module.py)``: one row per function."""
    match = _FRAME.match(frame)
    if not match:
        return frame
    path = match.group("file")
    parts = path.replace("\\", "/").split("/")
    where = "/".join(parts[-2:]) if len(parts) > 1 else path
    return f"{match.group('func')} ({where})"


def summarise(lines: list[str], top: int, match: str | None) -> str:
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    total = 0
    for line in lines:
        line = line.rstrip("\n")
        if not line or " " not in line:
            continue
        stack, _, count_text = line.rpartition(" ")
        try:
            count = int(count_text)
        except ValueError:
            continue
        frames = stack.split(";")
        if frames and frames[0].startswith(("thread (", "process ")):
            if frames[0].startswith("process "):
                frames = frames[1:]
            if frames and frames[0].startswith("thread ("):
                threads[frames[0]] += count
                frames = frames[1:]
        if not frames:
            continue
        if match and not any(match in f for f in frames):
            continue
        total += count
        short = [_short(f) for f in frames]
        own[short[-1]] += count
        for name in set(short):
            inclusive[name] += count
    out: list[str] = [f"samples: {total}" + (f" (stacks containing {match!r})" if match else "")]
    if threads:
        out.append("\nby thread:")
        for name, count in threads.most_common(top):
            out.append(f"  {count / max(total, 1) * 100:6.1f}%  {name}")
    out.append("\nown time (top of stack):")
    for name, count in own.most_common(top):
        out.append(f"  {count / max(total, 1) * 100:6.1f}%  {name}")
    out.append("\ninclusive (anywhere on the stack):")
    for name, count in inclusive.most_common(top):
        out.append(f"  {count / max(total, 1) * 100:6.1f}%  {name}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--match", default=None, help="only stacks with a frame containing TEXT")
    args = parser.parse_args(argv)
    lines = args.profile.read_text(encoding="utf-8", errors="replace").splitlines()
    print(summarise(lines, args.top, args.match))
    return 0


if __name__ == "__main__":
    sys.exit(main())
