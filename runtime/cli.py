"""``toolprep`` command line: ``toolprep acp`` (the agent on stdio), ``toolprep serve`` (the
daemon) and ``toolprep demo``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import NamedTuple

from toolprep.runtime.assembly import configure_logging
from toolprep.runtime.daemon.session_pool import DEFAULT_GRACE_S
from toolprep.runtime.event_loops import EVENT_LOOPS
from toolprep.runtime.mcp.config import DEFAULT_CALL_TIMEOUT_S, DEFAULT_MAX_TOOLS
from toolprep.runtime.mcp.policy import McpPolicy
from toolprep.runtime.process_tuning import tune_process_for_daemon
from toolprep.runtime.providers.sse import DEFAULT_MAX_EVENT_BYTES
from toolprep.runtime.retry import DEFAULT_MAX_RETRY_WAIT
from toolprep.runtime.session_host import SessionArchive, SessionHost, SessionHostError
from toolprep.runtime.stop_signals import StopSignals
from toolprep.runtime.store import SessionStore, StoreError


def _runtime_arguments(acp: argparse.ArgumentParser) -> None:
    """The options that shape the runtime, alike for ``acp`` and ``serve``."""
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
        "--context-window",
        type=int,
        default=None,
        metavar="TOKENS",
        help="context size of the models, for the editor's usage display (default: known "
        "per model name, else 128000)",
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
        "--max-message-bytes",
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
    acp.add_argument(
        "--mcp-call-timeout",
        type=float,
        default=DEFAULT_CALL_TIMEOUT_S,
        metavar="SECONDS",
        help="how long a call to a session's MCP server may take before its card fails "
        f"(default {DEFAULT_CALL_TIMEOUT_S:g})",
    )
    acp.add_argument(
        "--max-mcp-tools",
        type=int,
        default=DEFAULT_MAX_TOOLS,
        metavar="N",
        help="tools offered per MCP server of a session; a server listing more has the rest "
        f"left out, with a warning (default {DEFAULT_MAX_TOOLS})",
    )
    acp.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        default="auto",
        help="loop for the provider streams: uvloop (pip install 'toolprep[uvloop]') lowers "
        "tool-card latency under load; auto uses it when installed (default auto)",
    )
    acp.add_argument("--log-level", default="WARNING", help="stderr log level (default WARNING)")
    persistence = acp.add_mutually_exclusive_group()
    persistence.add_argument(
        "--data-dir",
        default=None,
        metavar="DIR",
        help="keep sessions (history and the frames sent) in DIR/sessions.db, so that "
        "session/load and session/list work across restarts (default: "
        "$XDG_DATA_HOME/toolprep, else ~/.local/share/toolprep)",
    )
    persistence.add_argument(
        "--no-persist",
        action="store_true",
        help="keep sessions in memory only: nothing is written, nothing can be loaded later",
    )
    acp.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="spread sessions over N worker processes, each a whole runtime (default: one "
        "per core when there is more than one; 1 keeps every session in this process)",
    )


def _acp_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    acp = sub.add_parser("acp", help="run the ACP agent on stdio (what an editor launches)")
    _runtime_arguments(acp)


def _serve_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser(
        "serve", help="run a daemon serving ACP over WebSocket; its sessions outlive connections"
    )
    _runtime_arguments(serve)
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    serve.add_argument(
        "--port", type=int, default=8765, help="port (default 8765; 0 picks a free one)"
    )
    serve.add_argument(
        "--token",
        default=None,
        help="require 'Authorization: Bearer TOKEN' (default: $TOOLPREP_TOKEN; required "
        "for a non-loopback --host)",
    )
    serve.add_argument(
        "--max-sessions",
        type=int,
        default=None,
        metavar="N",
        help="open sessions at most (default: no limit)",
    )
    serve.add_argument(
        "--disconnect-grace",
        type=float,
        default=DEFAULT_GRACE_S,
        metavar="SECONDS",
        help="how long a session's running turn goes on with no client attached before it "
        f"is cancelled, and an idle one stays open (default {DEFAULT_GRACE_S:g})",
    )
    _client_mcp_arguments(serve)
    serve.add_argument(
        "--ray",
        default=None,
        metavar="ADDRESS",
        help="run the sessions on shard actors of the Ray cluster at ADDRESS (auto, "
        "HOST:PORT); needs the ray extra: pip install 'toolprep[ray]'",
    )
    serve.add_argument(
        "--shards",
        type=int,
        default=None,
        metavar="N",
        help="with --ray: N shard actors, each a whole runtime (default: one per CPU of "
        "the cluster)",
    )
    serve.add_argument(
        "--ray-name",
        default="toolprep",
        metavar="NAME",
        help="with --ray: this daemon's name on the cluster (its placement registry is "
        "NAME-sessions), so several daemons can share one cluster (default toolprep)",
    )


def _client_mcp_arguments(serve: argparse.ArgumentParser) -> None:
    """What a daemon's clients may name in ``mcpServers``: by default, nothing."""
    serve.add_argument(
        "--allow-mcp-command",
        action="append",
        default=[],
        metavar="PROGRAM",
        help="let clients start stdio MCP servers whose command is exactly PROGRAM, with "
        "whatever arguments and env they give (repeatable; default: none, since a client "
        "could otherwise run any program as you)",
    )
    serve.add_argument(
        "--allow-client-mcp",
        action="store_true",
        help="let clients start stdio MCP servers with any command",
    )
    serve.add_argument(
        "--allow-mcp-network",
        action="store_true",
        help="let clients name http/sse MCP servers on any address (default: public "
        "addresses only, never loopback, private, link-local or other internal ones)",
    )


def _client_mcp_policy(args: argparse.Namespace) -> McpPolicy:
    return McpPolicy(
        any_command=args.allow_client_mcp,
        commands=frozenset(args.allow_mcp_command),
        any_address=args.allow_mcp_network,
    )


def _demo_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser("demo", help="drive one scripted session through the agent and show it")
    demo.add_argument("--json", action="store_true", help="print the raw frames instead")
    demo.add_argument("--replay", default=None, metavar="FILE", help="replay script to use")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="toolprep", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _acp_parser(sub)
    _serve_parser(sub)
    _demo_parser(sub)
    return parser


_EXIT_BUDGET_S = 5.0
_STOP_POLL_S = 0.1
_START_ERRORS = (ValueError, OSError, SessionHostError, StoreError)


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


class _Hosted(NamedTuple):
    host: SessionHost
    archive: SessionArchive | None
    store: SessionStore | None
    """This process's connection to the store, closed (checkpointing the WAL) at exit."""


def _build_host(args: argparse.Namespace, stop: StopSignals, mcp_policy: McpPolicy) -> _Hosted:
    """The sessions' host from the runtime options: this process, or ``--workers`` processes.

    ``mcp_policy`` says which MCP servers clients may name; it travels with the options.

    Raises ``ValueError``, ``OSError``, ``SessionHostError`` or ``StoreError``
    for options it cannot be built from.
    """
    from toolprep.runtime.assembly import (
        RUNTIME_OPTIONS,
        check_options,
        default_data_dir,
        runtime_from_options,
        store_path,
    )
    from toolprep.runtime.store import SessionStore
    from toolprep.runtime.workers import WorkerHost, WorkerSpec, default_worker_count

    if getattr(args, "shards", None) is not None and getattr(args, "ray", None) is None:
        raise ValueError("--shards goes with --ray ADDRESS; on one machine use --workers N")
    if not args.no_persist and args.data_dir is None:
        args.data_dir = str(default_data_dir())
    options = {name: getattr(args, name) for name in RUNTIME_OPTIONS}
    options["mcp_policy"] = mcp_policy.to_options()
    workers = default_worker_count() if args.workers is None else args.workers
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    check_options(options)
    path = store_path(options)
    front_store = SessionStore(path) if path is not None else None
    if front_store is not None:
        # Before any session runs: what a killed predecessor left open gets its discard.
        front_store.close_open_cards()
    if getattr(args, "ray", None) is not None:
        return _ray_hosted(args, options, front_store, stop)
    if workers == 1:
        if front_store is not None:
            front_store.close()
        runtime = runtime_from_options(options)
        stop.on_force = runtime.kill_tool_processes_now
        return _Hosted(runtime, runtime if runtime.store is not None else None, runtime.store)
    spec = WorkerSpec("toolprep.runtime.assembly:runtime_from_options", options)
    worker_host = WorkerHost(spec, workers, store=front_store)
    stop.on_force = worker_host.kill_tool_processes_now
    return _Hosted(worker_host, worker_host if front_store is not None else None, front_store)


def _ray_hosted(
    args: argparse.Namespace,
    options: dict[str, object],
    store: SessionStore | None,
    stop: StopSignals,
) -> _Hosted:
    """``serve --ray``: the sessions on shard actors of a Ray cluster (the ``ray`` extra)."""
    if args.workers is not None:
        raise ValueError("--workers does not go with --ray: --shards N says how many runtimes run")
    try:
        from toolprep.runtime.ray_host.launch import ray_host_from_options
    except ImportError as exc:
        raise SessionHostError(
            f"--ray needs the ray extra (pip install 'toolprep[ray]'): {exc}"
        ) from None
    host = ray_host_from_options(args.ray, args.shards, options, store, name=args.ray_name)
    stop.on_force = host.kill_tool_processes_now
    return _Hosted(host, host if store is not None else None, store)


def _serve_acp(args: argparse.Namespace, stop: StopSignals) -> int:
    from toolprep.runtime.acp.agent import AcpAgent
    from toolprep.runtime.acp.jsonrpc import JsonRpcConnection

    configure_logging(args.log_level)
    # stdout carries only protocol messages: anything printed by accident goes to stderr.
    protocol_out = sys.stdout.buffer
    sys.stdout = sys.stderr
    try:
        # The client is the editor that launched this process: its servers are the user's.
        hosted = _build_host(args, stop, McpPolicy.trusted())
    except _START_ERRORS as exc:
        print(f"toolprep: {exc}", file=sys.stderr)
        return 2
    # Unbuffered: the reader thread may still be blocked reading when the process exits,
    # and a buffered stream's lock held by it would abort interpreter shutdown.
    protocol_in = open(sys.stdin.fileno(), "rb", buffering=0, closefd=False)  # noqa: SIM115
    connection = JsonRpcConnection(protocol_in, protocol_out, max_line_bytes=args.max_line_bytes)
    agent = AcpAgent(hosted.host, connection, hosted.archive)
    tune_process_for_daemon()
    agent.serve(lambda: stop.requested)
    if hosted.store is not None:
        hosted.store.close()
    return 0


def run_serve(args: argparse.Namespace) -> int:
    """Serve ACP over WebSocket until SIGTERM/SIGINT; then every running turn is cancelled
    (clients see the discards and their prompts answered) before the sockets close."""
    stop = StopSignals()
    stop.install()
    try:
        return _exit_within(_serve_daemon(args, stop), _EXIT_BUDGET_S)
    finally:
        stop.restore()


def _serve_daemon(args: argparse.Namespace, stop: StopSignals) -> int:
    from toolprep.runtime.daemon.server import AcpServer
    from toolprep.runtime.daemon.session_pool import SessionPool

    configure_logging(args.log_level)
    token = args.token or os.environ.get("TOOLPREP_TOKEN") or None
    try:
        if args.max_sessions is not None and args.max_sessions < 1:
            raise ValueError(f"--max-sessions must be >= 1, got {args.max_sessions}")
        mcp_policy = _client_mcp_policy(args)
        hosted = _build_host(args, stop, mcp_policy)
    except _START_ERRORS as exc:
        print(f"toolprep: {exc}", file=sys.stderr)
        return 2
    pool = SessionPool(
        hosted.host,
        hosted.archive,
        max_sessions=args.max_sessions,
        grace_s=args.disconnect_grace,
        mcp_policy=mcp_policy,
    )
    try:
        server = AcpServer(
            pool,
            host=args.host,
            port=args.port,
            token=token,
            max_message_bytes=args.max_line_bytes,
        )
    except (ValueError, OSError) as exc:
        pool.shutdown()
        print(f"toolprep: {exc}", file=sys.stderr)
        return 2
    listener = threading.Thread(target=server.serve_forever, name="toolprep-listener", daemon=True)
    listener.start()
    print(f"toolprep: serving ACP on {server.url}", file=sys.stderr, flush=True)
    tune_process_for_daemon()
    while not stop.requested:
        time.sleep(_STOP_POLL_S)
    logging.getLogger(__name__).info("stop requested: ending the running turns")
    pool.shutdown()
    server.shutdown()
    if hosted.store is not None:
        hosted.store.close()
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
    if args.command == "serve":
        return run_serve(args)
    from toolprep.runtime.demo import run_demo

    return run_demo(json_output=args.json, replay_file=args.replay)


if __name__ == "__main__":
    sys.exit(main())
