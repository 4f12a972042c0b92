"""``toolprep`` command line: ``toolprep acp`` (the agent) and ``toolprep demo``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from collections.abc import Sequence

from toolprep.runtime.gc_tuning import tune_gc_for_daemon
from toolprep.runtime.providers.sse import DEFAULT_MAX_EVENT_BYTES
from toolprep.runtime.retry import DEFAULT_MAX_RETRY_WAIT
from toolprep.runtime.stop_signals import StopSignals


def _acp_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    acp = sub.add_parser("acp", help="run the ACP agent on stdio (what an editor launches)")
    acp.add_argument(
        "--provider",
        choices=("anthropic", "openai", "replay"),
        default=None,
        help="default: anthropic if ANTHROPIC_API_KEY is set, else openai if "
        "OPENAI_API_KEY is set, else the embedded replay provider",
    )
    acp.add_argument("--model", default=None, help="model name (default depends on provider)")
    acp.add_argument(
        "--fallback-model",
        action="append",
        default=[],
        metavar="M",
        help="model to fall back to when the previous one keeps failing (repeatable)",
    )
    acp.add_argument(
        "--base-url",
        default=None,
        help="provider base URL (any OpenAI-compatible server with --provider openai)",
    )
    acp.add_argument(
        "--max-retries",
        type=int,
        default=3,
        metavar="N",
        help="retries per model for failed streams (default 3)",
    )
    acp.add_argument(
        "--max-retry-wait",
        type=float,
        default=DEFAULT_MAX_RETRY_WAIT,
        metavar="SECONDS",
        help="longest wait before a retry; a provider's retry-after beyond it is capped "
        f"(default {DEFAULT_MAX_RETRY_WAIT:g})",
    )
    acp.add_argument(
        "--max-sse-event-bytes",
        type=int,
        default=DEFAULT_MAX_EVENT_BYTES,
        metavar="N",
        help="largest accepted server-sent event from the provider; a bigger one fails "
        "the request without retrying (default 8 MiB)",
    )
    acp.add_argument(
        "--replay",
        default=None,
        metavar="FILE",
        help="replay script for --provider replay (default: the embedded script)",
    )
    acp.add_argument(
        "--max-line-bytes",
        type=int,
        default=8 * 1024 * 1024,
        help="largest accepted JSON-RPC message (default 8 MiB)",
    )
    acp.add_argument(
        "--allow-shell",
        action="store_true",
        help="run shell commands without asking for permission",
    )
    acp.add_argument(
        "--scrub-env",
        action="append",
        default=[],
        metavar="NAME",
        help="keep variable NAME out of tool subprocesses (repeatable; also "
        "TOOLPREP_SCRUB_ENV=A,B); provider keys and *_API_KEY are always kept out",
    )
    acp.add_argument("--log-level", default="WARNING", help="stderr log level (default WARNING)")
    acp.add_argument(
        "--data-dir",
        default=None,
        metavar="DIR",
        help="keep sessions (history and the frames sent) in DIR/sessions.db, so that "
        "session/load and session/list work across restarts (default: in memory only)",
    )
    acp.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="spread sessions over N worker processes, each a whole runtime (default: one "
        "per core when there is more than one; 1 keeps every session in this process)",
    )


def _demo_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser("demo", help="drive one scripted session through the agent and show it")
    demo.add_argument("--json", action="store_true", help="print the raw frames instead")
    demo.add_argument("--replay", default=None, metavar="FILE", help="replay script to use")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="toolprep", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _acp_parser(sub)
    _demo_parser(sub)
    return parser


_EXIT_BUDGET_S = 5.0


def run_acp(args: argparse.Namespace) -> int:
    """Serve ACP on stdio until stdin ends or SIGTERM/SIGINT, then exit 0.

    The signal handlers go in first, so even a signal during start-up takes
    the graceful path instead of a traceback.
    """
    stop = StopSignals()
    stop.install()
    try:
        return _exit_within(_serve_acp(args, stop), _EXIT_BUDGET_S)
    finally:
        stop.restore()


def _serve_acp(args: argparse.Namespace, stop: StopSignals) -> int:
    from toolprep.runtime.acp.agent import AcpAgent
    from toolprep.runtime.acp.jsonrpc import JsonRpcConnection
    from toolprep.runtime.assembly import (
        RUNTIME_OPTIONS,
        check_options,
        configure_logging,
        runtime_from_options,
        store_path,
    )
    from toolprep.runtime.session_host import SessionArchive, SessionHost, SessionHostError
    from toolprep.runtime.store import SessionStore, StoreError
    from toolprep.runtime.workers import WorkerHost, WorkerSpec, default_worker_count

    configure_logging(args.log_level)
    options = {name: getattr(args, name) for name in RUNTIME_OPTIONS}
    workers = default_worker_count() if args.workers is None else args.workers
    host: SessionHost
    archive: SessionArchive | None = None
    try:
        if workers < 1:
            raise ValueError(f"--workers must be >= 1, got {workers}")
        check_options(options)
        path = store_path(options)
        front_store = SessionStore(path) if path is not None else None
        if front_store is not None:
            # Before any session runs: what a killed predecessor left open gets its discard.
            front_store.close_open_cards()
        # stdout carries only protocol messages: anything printed by accident goes to stderr.
        protocol_out = sys.stdout.buffer
        sys.stdout = sys.stderr
        if workers == 1:
            if front_store is not None:
                front_store.close()
            runtime = runtime_from_options(options)
            stop.on_force = runtime.kill_tool_processes_now
            host = runtime
            archive = runtime if runtime.store is not None else None
        else:
            spec = WorkerSpec("toolprep.runtime.assembly:runtime_from_options", options)
            worker_host = WorkerHost(spec, workers, store=front_store)
            stop.on_force = worker_host.kill_tool_processes_now
            host = worker_host
            archive = worker_host if front_store is not None else None
    except (ValueError, OSError, SessionHostError, StoreError) as exc:
        print(f"toolprep: {exc}", file=sys.stderr)
        return 2
    # Unbuffered: the reader thread may still be blocked reading when the process exits,
    # and a buffered stream's lock held by it would abort interpreter shutdown.
    protocol_in = open(sys.stdin.fileno(), "rb", buffering=0, closefd=False)  # noqa: SIM115
    connection = JsonRpcConnection(protocol_in, protocol_out, max_line_bytes=args.max_line_bytes)
    agent = AcpAgent(host, connection, archive)
    tune_gc_for_daemon()
    agent.serve(lambda: stop.requested)
    return 0


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


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "acp":
        return run_acp(args)
    from toolprep.runtime.demo import run_demo

    return run_demo(json_output=args.json, replay_file=args.replay)


if __name__ == "__main__":
    sys.exit(main())
