"""How frames should travel from a Ray shard actor to its front: the measurement behind the choice.

One actor produces 400-byte frames on a thread of its own, paced at a rate
(or flat out), into a queue, as a shard's runtime does; the driver takes them
three ways and stamps each frame's latency (production -> in the driver):

- ``stream``: one streaming-generator call (``num_returns="streaming"``) for
  the actor's life, yielding every frame that is ready as one item (what
  ``toolprep.runtime.ray_host`` does);
- ``poll``: a method call per batch that blocks until frames are ready;
- ``queue``: the actor pushes batches into a ``ray.util.queue.Queue`` (a
  channel actor of its own) that the driver reads.

Run: ``python -m benchmarks.ray_frames [--frames 20000] [--size 400]`` (needs the ray extra;
starts and stops a local two-CPU cluster on 127.0.0.1).
"""

from __future__ import annotations

import argparse
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks import _harness as h
from tests.support.ray_cluster import local_cluster

STAMP = 8
RATES = (200.0, 5000.0, 0.0)
"""Frames per second offered; 0 is flat out."""


class Producer:
    """The actor's state: frames stamped with their production time, drained in batches."""

    def __init__(self) -> None:
        self._frames: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()

    def produce(self, count: int, size: int, rate: float) -> None:
        def run() -> None:
            gap = 1.0 / rate if rate else 0.0
            start = time.perf_counter()
            for i in range(count):
                if gap:
                    wait = start + i * gap - time.perf_counter()
                    if wait > 0:
                        time.sleep(wait)
                self._frames.put(time.time_ns().to_bytes(STAMP, "big") + b"x" * size)
            self._frames.put(None)

        threading.Thread(target=run, daemon=True).start()

    def _batch(self, block_s: float | None = None) -> list[bytes | None]:
        try:
            batch = [self._frames.get(timeout=block_s)]
        except queue.Empty:
            return []
        while len(batch) < 512 and batch[-1] is not None:
            try:
                batch.append(self._frames.get_nowait())
            except queue.Empty:
                break
        return batch

    def stream(self) -> Iterator[list[bytes | None]]:
        while True:
            batch = self._batch()
            yield batch
            if batch[-1] is None:
                return

    def poll(self) -> list[bytes | None]:
        return self._batch(1.0)

    def pump(self, channel: Any) -> None:
        def run() -> None:
            while True:
                batch = self._batch()
                channel.put(batch)
                if batch[-1] is None:
                    return

        threading.Thread(target=run, daemon=True).start()


def measure(
    ray: Any, actor_class: Any, kind: str, count: int, size: int, rate: float
) -> dict[str, Any]:
    actor = actor_class.remote()
    latencies: list[float] = []
    batches: Callable[[], list[bytes | None]]
    if kind == "stream":
        stream = actor.stream.remote()

        def batches() -> list[bytes | None]:
            got: list[bytes | None] = ray.get(next(stream))
            return got

    elif kind == "poll":

        def batches() -> list[bytes | None]:
            got: list[bytes | None] = ray.get(actor.poll.remote())
            return got

    else:
        from ray.util.queue import Queue

        channel = Queue()
        ray.get(actor.pump.remote(channel))

        def batches() -> list[bytes | None]:
            got: list[bytes | None] = channel.get()
            return got

    ray.get(actor.produce.remote(count, size, rate))
    started = time.perf_counter()
    done = False
    while not done:
        batch = batches()
        now = time.time_ns()
        for frame in batch:
            if frame is None:
                done = True
            else:
                latencies.append((now - int.from_bytes(frame[:STAMP], "big")) / 1e6)
    elapsed = time.perf_counter() - started
    ray.kill(actor)
    latencies.sort()
    return {
        "kind": kind,
        "rate": rate or "max",
        "frames_per_s": round(len(latencies) / elapsed),
        "p50_ms": round(latencies[len(latencies) // 2], 2),
        "p99_ms": round(latencies[int(len(latencies) * 0.99)], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=20000, help="frames per paced run")
    parser.add_argument("--size", type=int, default=400, help="bytes per frame")
    args = parser.parse_args(argv)
    with local_cluster(2, h.REPO) as ray:
        # Threaded, so the blocking ``stream`` / ``poll`` never hold up ``produce``.
        actor_class = ray.remote(num_cpus=0, max_concurrency=4)(Producer)
        for kind in ("stream", "poll", "queue"):
            for rate in RATES:
                count = min(args.frames, int(rate * 5)) if rate else args.frames * 2
                row = measure(ray, actor_class, kind, count, args.size, rate)
                print(
                    f"{row['kind']:<7} rate {row['rate']!s:>6}  {row['frames_per_s']:>9,} frames/s"
                    f"  p50 {row['p50_ms']:>7.2f} ms  p99 {row['p99_ms']:>7.2f} ms",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
