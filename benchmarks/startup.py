"""Startup: how long an editor waits for ``toolprep acp`` to answer, and for its first card.

For each wire (the embedded ``replay`` provider, and ``anthropic`` / ``openai``
against ``benchmarks.support.load_server`` on loopback with a dummy key) a fresh
``toolprep acp --workers 1 --no-persist`` is started ``--repeat`` times. The
editor side writes ``initialize`` at once (the agent reads it when ready),
then ``session/new`` and a ``session/prompt``, and stamps when it reads

- the ``initialize`` reply, and
- the first preparing tool card (``session/update`` ``tool_call``, status
  ``pending``),

both counted from just before the process was started. Each figure is also
given as a ratio to a bare ``python -c pass`` of the same interpreter,
measured in the same run, so runs on machines of different speed (or load)
compare. ``--python`` runs the agent with another interpreter, e.g. one whose
environment holds an older checkout, to compare two versions in one run.

Run: ``python -m benchmarks.startup [--repeat 5] [--wires replay,anthropic,openai]
[--python PATH]``.
"""

from __future__ import annotations

import argparse
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import orjson

from benchmarks import _harness as h

WIRES = ("replay", "anthropic", "openai")
DEADLINE_S = 120.0
"""The longest any one step may take before the run is abandoned."""

PROMPT = "Read README.md and tell me what this project is."
"""Matches the replay script's first turn (a ``read_file`` card); the loopback server
answers any prompt with tool calls."""


@dataclass
class Timings:
    initialize_s: list[float] = field(default_factory=list)
    first_card_s: list[float] = field(default_factory=list)


def _reader(stream: IO[bytes], out: queue.Queue[tuple[float, dict[str, Any]]]) -> None:
    for line in stream:
        out.put((time.perf_counter(), orjson.loads(line)))


def _wait(
    messages: queue.Queue[tuple[float, dict[str, Any]]], wanted: Any, what: str
) -> tuple[float, dict[str, Any]]:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            stamp, message = messages.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise RuntimeError(f"no {what} within {DEADLINE_S:g} s") from None
        if wanted(message):
            return stamp, message


def _is_preparing_card(message: dict[str, Any]) -> bool:
    update = message.get("params", {}).get("update", {})
    return bool(
        message.get("method") == "session/update"
        and update.get("sessionUpdate") == "tool_call"
        and update.get("status") == "pending"
    )


def _command(python: str, wire: str, base_url: str | None) -> list[str]:
    command = [python, "-m", "toolprep.runtime.cli", "acp", "--provider", wire]
    command += ["--workers", "1", "--no-persist"]
    if base_url is not None:
        command += ["--base-url", base_url, "--model", "bench", "--max-retries", "0"]
    return command


def _environment(wire: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    if wire in h.API_KEY_VARIABLES:
        env[h.API_KEY_VARIABLES[wire]] = "bench"
    return env


def _send(stdin: IO[bytes], message: dict[str, Any]) -> None:
    stdin.write(orjson.dumps({"jsonrpc": "2.0", **message}) + b"\n")
    stdin.flush()


def one_start(python: str, wire: str, base_url: str | None, cwd: str) -> tuple[float, float]:
    """Seconds to the ``initialize`` reply and to the first preparing card."""
    messages: queue.Queue[tuple[float, dict[str, Any]]] = queue.Queue()
    started = time.perf_counter()
    process = subprocess.Popen(
        _command(python, wire, base_url),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=cwd,
        env=_environment(wire),
    )
    assert process.stdin is not None and process.stdout is not None
    reader = threading.Thread(target=_reader, args=(process.stdout, messages), daemon=True)
    reader.start()
    try:
        _send(process.stdin, {"id": 1, "method": "initialize", "params": {"protocolVersion": 1}})
        initialized, _ = _wait(messages, lambda m: m.get("id") == 1, "initialize reply")
        _send(
            process.stdin,
            {"id": 2, "method": "session/new", "params": {"cwd": cwd, "mcpServers": []}},
        )
        _, opened = _wait(messages, lambda m: m.get("id") == 2, "session/new reply")
        session_id = opened["result"]["sessionId"]
        prompt = [{"type": "text", "text": PROMPT}]
        params = {"sessionId": session_id, "prompt": prompt}
        _send(process.stdin, {"id": 3, "method": "session/prompt", "params": params})
        carded, _ = _wait(messages, _is_preparing_card, "preparing tool card")
        return initialized - started, carded - started
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        reader.join(10)
        process.stdout.close()


def bare_start(python: str) -> float:
    started = time.perf_counter()
    subprocess.run([python, "-c", "pass"], check=True, timeout=DEADLINE_S)
    return time.perf_counter() - started


def _row(name: str, values: Sequence[float], bare: float) -> list[str]:
    low, mid = min(values), statistics.median(values)
    return [name, f"{low:.2f}", f"{mid:.2f}", f"{low / bare:.1f}x", f"{mid / bare:.1f}x"]


def _print_table(rows: list[list[str]]) -> None:
    header = ["", "min s", "median s", "min / bare", "median / bare"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="starts per wire (default 5)")
    parser.add_argument(
        "--wires", default=",".join(WIRES), help=f"comma-separated (default {','.join(WIRES)})"
    )
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="interpreter to run the agent with (default: this one)",
    )
    args = parser.parse_args()
    wires = [w for w in args.wires.split(",") if w]
    unknown = set(wires) - set(WIRES)
    if unknown:
        parser.error(f"unknown wire(s): {', '.join(sorted(unknown))}")
    timings = {wire: Timings() for wire in wires}
    bare: list[float] = []
    with h.loopback_server(rate=200.0, tool="read_file") as server:
        cwd = str(h.REPO)
        for _ in range(args.repeat):
            bare.append(bare_start(args.python))
            for wire in wires:
                base_url = None
                if wire != "replay":
                    base_url = server.base_url + ("/v1" if wire == "openai" else "")
                initialize_s, card_s = one_start(args.python, wire, base_url, cwd)
                timings[wire].initialize_s.append(initialize_s)
                timings[wire].first_card_s.append(card_s)
    floor = statistics.median(bare)
    print(f"python -c pass: min {min(bare):.3f} s, median {floor:.3f} s ({args.repeat} runs)")
    rows = [_row("python -c pass", bare, floor)]
    for wire, got in timings.items():
        rows.append(_row(f"{wire}: initialize", got.initialize_s, floor))
        rows.append(_row(f"{wire}: first card", got.first_card_s, floor))
    _print_table(rows)


if __name__ == "__main__":
    main()
