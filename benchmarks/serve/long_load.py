"""``session/load`` of a long session over fresh connections: cold from the store, then warm."""

from __future__ import annotations

import argparse
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks import _harness as h
from benchmarks.serve.daemon import serve_daemon
from benchmarks.serve.fresh_load import load_over_fresh_connection
from benchmarks.serve.run import dir_files
from benchmarks.store import record_turn, turn_frames, turn_history

__all__ = ["LOADS", "build_long_session", "run_long_load"]

LOADS = 5


def build_long_session(data_dir: Path, cwd: str, turns: int) -> tuple[str, int]:
    """A ``turns``-turn session in ``data_dir``'s store, written as the runtime writes it.

    Released at the end: a session still owned by a live process (this one)
    would be refused to the daemon.
    """
    from toolprep.messages.content import Content
    from toolprep.runtime.hosting.assembly import STORE_FILE
    from toolprep.runtime.store import SessionStore
    from toolprep.runtime.store.journal import StoreJournal

    session_id = f"sess_{uuid.uuid4().hex}"
    with SessionStore(data_dir / STORE_FILE) as store:
        journal = StoreJournal(store)
        store.sessions.create(session_id, cwd, "bench")
        history: list[Content] = []
        for n in range(turns):
            history.extend(turn_history(n))
            record_turn(journal, session_id, turn_frames(n), tuple(history))
        if not journal.close(timeout=120):
            raise RuntimeError("the journal did not finish writing the long session")
        store.claims.release(session_id)
    return session_id, turns * len(turn_frames(0))


def _store_load_ms(data_dir: Path, session_id: str, repeats: int = 3) -> float:
    """``Sessions.load`` alone, in this process: the floor under a cold ``session/load``."""
    from toolprep.runtime.hosting.assembly import STORE_FILE
    from toolprep.runtime.store import SessionStore

    times = []
    with SessionStore(data_dir / STORE_FILE) as store:
        for _ in range(repeats):
            t0 = time.perf_counter()
            store.sessions.load(session_id)
            times.append((time.perf_counter() - t0) * 1000)
    return round(min(times), 2)


def run_long_load(
    server: h.LoopbackServer, args: argparse.Namespace, workdir: str, scratch: Path
) -> dict[str, Any]:
    """``session/load`` of a ``--load-turns`` session: once from the store, then live."""
    data_dir = scratch / "long-session"
    data_dir.mkdir()
    t0 = time.perf_counter()
    session_id, expected = build_long_session(data_dir, workdir, args.load_turns)
    built_s = time.perf_counter() - t0
    store_ms = _store_load_ms(data_dir, session_id)
    base_url = server.base_url + ("/v1" if args.provider == "openai" else "")
    with serve_daemon(args.provider, base_url, args.workers, data_dir, scratch) as daemon:
        samples = [load_over_fresh_connection(daemon, session_id, workdir) for _ in range(LOADS)]
    short = [s for s in samples if s["frames"] != expected]
    cold, warm = samples[0], samples[1:]
    warm_reply = sorted(s["reply_ms"] for s in warm)
    return {
        "turns": args.load_turns,
        "frames_expected": expected,
        "loads_with_missing_frames": len(short),
        "build_s": round(built_s, 2),
        "database_files": dir_files(data_dir),
        "store_load_ms": store_ms,
        "cold": cold,
        "warm": {
            "count": len(warm),
            "reply_ms_p50": h.percentile(warm_reply, 50.0),
            "reply_ms_max": warm_reply[-1] if warm_reply else None,
            "first_frame_ms_max": max((s["first_frame_ms"] or 0.0 for s in warm), default=None),
        },
        "samples": samples,
    }
