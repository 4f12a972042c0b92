"""What ``acp`` and ``serve`` share once their options are checked: building the sessions'
host from the options, and leaving the process within a budget on a stop signal.

Everything heavy (the actors, the store, the workers, Ray) is imported inside the functions,
so that importing this module to declare the commands costs nothing.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from toolprep.runtime.hosting.options import RuntimeOptions
from toolprep.runtime.kernel.observer import NO_OBSERVER, TurnObserver
from toolprep.runtime.kernel.session_host import SessionArchive, SessionHost, SessionHostError
from toolprep.runtime.mcp.policy import McpPolicy
from toolprep.runtime.process.stop_signals import StopSignals

if TYPE_CHECKING:
    from toolprep.runtime.store import SessionStore
    from toolprep.runtime.store.connection import Synchronous

__all__ = ["EXIT_BUDGET_S", "Hosted", "agent_meta", "build_host", "run_until_stopped"]

EXIT_BUDGET_S = 5.0
"""How long the other non-daemon threads get to finish once the serving is done."""


def run_until_stopped(serve: Callable[[StopSignals], int]) -> int:
    """``serve(stop)``'s exit status, SIGTERM/SIGINT/SIGHUP setting ``stop.requested``.

    The signal handlers go in first, so even a signal during start-up takes the graceful
    path instead of a traceback.
    """
    stop = StopSignals()
    stop.install()
    try:
        return _exit_within(serve(stop), EXIT_BUDGET_S)
    finally:
        stop.restore()


class Hosted(NamedTuple):
    host: SessionHost
    archive: SessionArchive | None
    store: SessionStore | None
    """This process's connection to the store, closed (checkpointing the WAL) at exit."""


def build_host(
    args: argparse.Namespace,
    stop: StopSignals,
    mcp_policy: McpPolicy,
    observer: TurnObserver = NO_OBSERVER,
    *,
    serves_metrics: bool = False,
) -> Hosted:
    """The sessions' host from the runtime options: this process, or ``--workers`` processes
    (``serve`` leaves it unset: one per core). ``observer`` watches an in-process runtime's
    turns; workers and shards start their own telemetry from the same ``OTEL_*`` variables,
    and, if this process ``serves_metrics`` (``/metrics``), record them for it to read.

    ``mcp_policy`` says which MCP servers clients may name; it travels with the options.

    Raises ``ValueError``, ``OSError``, ``SessionHostError`` or ``StoreError``
    for options it cannot be built from.
    """
    options, workers, path = _host_options(args, mcp_policy)
    if workers == 1 and getattr(args, "ray", None) is None:
        return _in_process(options, stop, observer)
    front_store = _front_store(path, args.synchronous)
    if getattr(args, "ray", None) is not None:
        return _ray_hosted(args, options, front_store, stop, serves_metrics, observer)
    return _worker_hosted(options, workers, front_store, stop, serves_metrics, observer)


def _host_options(
    args: argparse.Namespace, mcp_policy: McpPolicy
) -> tuple[RuntimeOptions, int, Path | None]:
    """The checked options, the worker count and the store's path (its folder made private)."""
    from toolprep.runtime.hosting.assembly import check_options, default_data_dir, store_path
    from toolprep.runtime.store.ownership import this_process
    from toolprep.runtime.store.private_files import make_private
    from toolprep.runtime.workers import default_worker_count

    if not args.no_persist and args.data_dir is None:
        args.data_dir = str(default_data_dir())
    # The workers own sessions in this process's name.
    options = RuntimeOptions.from_arguments(args).with_front(this_process(), mcp_policy)
    workers = default_worker_count() if args.workers is None else args.workers
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    check_options(options)
    path = store_path(options)
    if path is not None:  # before the store opens: transcripts are for their user alone
        make_private(path.parent)
    return options, workers, path


def _in_process(options: RuntimeOptions, stop: StopSignals, observer: TurnObserver) -> Hosted:
    """Every session in this process, on one runtime."""
    from toolprep.runtime.hosting.assembly import runtime_from_options

    runtime = runtime_from_options(options, observer=observer)
    if runtime.store is not None:
        # Before any session runs: what a killed predecessor left open gets its discard
        # (or, if the store cannot be written now, once it can).
        runtime.store.cards.close_open_cards()
    stop.on_force = runtime.kill_tool_processes_now
    return Hosted(runtime, runtime if runtime.store is not None else None, runtime.store)


def _front_store(path: Path | None, synchronous: Synchronous) -> SessionStore | None:
    """The store of a front whose sessions run elsewhere, its open cards discarded."""
    from toolprep.runtime.store import SessionStore

    front_store = SessionStore(path, synchronous=synchronous) if path is not None else None
    if front_store is not None:
        front_store.cards.close_open_cards()  # as in ``_in_process``
    return front_store


def _worker_hosted(
    options: RuntimeOptions,
    workers: int,
    store: SessionStore | None,
    stop: StopSignals,
    serves_metrics: bool,
    observer: TurnObserver,
) -> Hosted:
    """``--workers N``: the sessions spread over N worker processes."""
    from toolprep.runtime.telemetry.setup import WORKER_METRICS_VARIABLE
    from toolprep.runtime.workers import WorkerHost, WorkerSpec
    from toolprep.runtime.workers.codec import dump_options

    env = {**os.environ, WORKER_METRICS_VARIABLE: "1"} if serves_metrics else None
    spec = WorkerSpec(
        "toolprep.runtime.hosting.assembly:worker_runtime_from_options",
        dump_options(options),
        env=env,
    )
    worker_host = WorkerHost(spec, workers, store=store, observer=observer)
    stop.on_force = worker_host.kill_tool_processes_now
    return Hosted(worker_host, worker_host if store is not None else None, store)


def _ray_hosted(
    args: argparse.Namespace,
    options: RuntimeOptions,
    store: SessionStore | None,
    stop: StopSignals,
    serves_metrics: bool,
    observer: TurnObserver,
) -> Hosted:
    """``serve --ray``: the sessions on shard actors of a Ray cluster (the ``ray`` extra)."""
    try:
        from toolprep.runtime.ray_host.launch import ray_host_from_options
    except ImportError as exc:
        raise SessionHostError(
            f"--ray needs the ray extra (pip install 'toolprep[ray]'): {exc}"
        ) from None
    host = ray_host_from_options(
        args.ray,
        args.shards,
        options,
        store,
        name=args.ray_name,
        observer=observer,
        serves_metrics=serves_metrics,
    )
    stop.on_force = host.kill_tool_processes_now
    return Hosted(host, host if store is not None else None, store)


def agent_meta(args: argparse.Namespace) -> dict[str, object]:
    """What ``initialize`` says under ``_meta.toolprep``: whether commands run sandboxed
    (logged once here when they cannot be)."""
    from toolprep.runtime.hosting.assembly import announce_sandbox

    return {"sandbox": announce_sandbox(RuntimeOptions.from_arguments(args)).to_meta()}


def _exit_within(code: int, budget_s: float) -> int:
    """``code`` once the other non-daemon threads are done, or an exit without them.

    Tool workers finish on their own once their calls are cancelled, but a
    tool blocked in a call that ignores cancellation must not keep the
    process alive after every reply has been written.
    """
    deadline = time.monotonic() + budget_s
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon:
            thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [t.name for t in threading.enumerate() if t is not current and not t.daemon]
    if stuck:
        logging.getLogger(__name__).warning(
            "leaving without waiting for busy threads: %s", ", ".join(stuck)
        )
        logging.shutdown()
        sys.stderr.flush()
        os._exit(code)
    return code
