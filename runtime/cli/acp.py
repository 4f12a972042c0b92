"""``toolprep acp``: the agent on stdin/stdout, the way an editor launches it."""

from __future__ import annotations

import argparse
import sys
from typing import BinaryIO

from toolprep.runtime.cli.hosting import agent_meta, build_host, run_until_stopped
from toolprep.runtime.cli.options import check_arguments, runtime_arguments, start_errors
from toolprep.runtime.hosting.assembly import configure_logging
from toolprep.runtime.kernel.observer import TurnObserver
from toolprep.runtime.mcp.policy import McpPolicy
from toolprep.runtime.process.stop_signals import StopSignals
from toolprep.runtime.process.tuning import tune_process_for_daemon

__all__ = ["add_acp_command", "run_acp"]

_ACP_DESCRIPTION = (
    "Run the agent on stdin/stdout, the way an editor launches it: JSON-RPC messages on "
    "stdout, logs on stderr. It stops when stdin closes, or on SIGTERM/SIGINT."
)


def add_acp_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    acp = sub.add_parser(
        "acp",
        help="run the ACP agent on stdio (what an editor launches)",
        description=_ACP_DESCRIPTION,
    )
    runtime_arguments(acp)
    # An editor starts one agent per window: its sessions stay in this process unless asked.
    acp.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="spread sessions over N worker processes, each a whole runtime (default 1: "
        "every session in this process)",
    )


def run_acp(args: argparse.Namespace) -> int:
    """Serve ACP on stdio until stdin ends or SIGTERM/SIGINT/SIGHUP, then exit 0."""
    return run_until_stopped(lambda stop: _serve_acp(args, stop))


def _serve_acp(args: argparse.Namespace, stop: StopSignals) -> int:
    configure_logging(args.log_level)
    try:
        check_arguments(args)
    except (ValueError, OSError) as exc:
        print(f"toolprep: {exc}", file=sys.stderr)
        return 2

    # stdout carries only protocol messages: anything printed by accident goes to stderr,
    # from here on (building the host may print).
    protocol_out = sys.stdout.buffer
    sys.stdout = sys.stderr
    from toolprep.runtime.telemetry.setup import telemetry_from_environ

    # OTLP if the OTEL_* variables ask for it (the client may pass them); else nothing.
    telemetry = telemetry_from_environ(prometheus=False, count_turns=True)
    try:
        return _serve_hosted(args, stop, protocol_out, telemetry.observer)
    finally:
        telemetry.shutdown()


def _serve_hosted(
    args: argparse.Namespace, stop: StopSignals, protocol_out: BinaryIO, observer: TurnObserver
) -> int:
    from toolprep.runtime.acp.stdio_serving import serve_stdio

    try:
        # The client is the editor that launched this process: its servers are the user's.
        hosted = build_host(args, stop, McpPolicy.trusted(), observer)
    except start_errors() as exc:
        print(f"toolprep: {exc}", file=sys.stderr)
        return 2
    meta = agent_meta(args)
    tune_process_for_daemon()
    serve_stdio(
        hosted.host,
        hosted.archive,
        output_stream=protocol_out,
        max_line_bytes=args.max_line_bytes,
        stop_requested=lambda: stop.requested,
        meta=meta,
    )
    if hosted.store is not None:
        hosted.store.close()
    return 0
