"""``toolprep`` command line: ``toolprep acp`` (the agent on stdio), ``toolprep serve`` (the
daemon) and ``toolprep demo``.

Only what parsing and checking the options needs is imported at the top: a bad
option is refused at once, and everything heavy (the actors, the provider SDKs,
the WebSocket server) loads after the checks. ``--help`` shows the plain texts
below, not this docstring.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from toolprep.messages.modes import MODES
from toolprep.runtime.assembly import check_options, configure_logging
from toolprep.runtime.compaction import DEFAULT_COMPACT_AT
from toolprep.runtime.config import DEFAULT_MODELS, resolve_settings
from toolprep.runtime.daemon.serve_options import (
    DEFAULT_REPLY_TIMEOUT_S,
    add_connection_arguments,
    check_connection_arguments,
)
from toolprep.runtime.daemon.session_pool import DEFAULT_GRACE_S
from toolprep.runtime.event_loops import EVENT_LOOPS
from toolprep.runtime.mcp.config import DEFAULT_CALL_TIMEOUT_S, DEFAULT_MAX_TOOLS
from toolprep.runtime.mcp.policy import McpPolicy
from toolprep.runtime.options import RuntimeOptions
from toolprep.runtime.process_secrets import hold_secret
from toolprep.runtime.process_tuning import tune_process_for_daemon
from toolprep.runtime.providers.sse import DEFAULT_MAX_EVENT_BYTES
from toolprep.runtime.retry import DEFAULT_MAX_RETRY_WAIT
from toolprep.runtime.session_host import SessionArchive, SessionHost, SessionHostError
from toolprep.runtime.stop_signals import StopSignals
from toolprep.runtime.tools.environment import SERVE_TOKEN_VARIABLE

if TYPE_CHECKING:
    from toolprep.runtime.daemon.runs_with import RunsWith
    from toolprep.runtime.daemon.serve_token import ServeToken
    from toolprep.runtime.store import SessionStore

_DESCRIPTION = (
    "toolprep: a coding agent for editors that speak ACP (Agent Client Protocol). "
    "Tool calls show up in the editor while the model is still writing their arguments."
)
_ACP_DESCRIPTION = (
    "Run the agent on stdin/stdout, the way an editor launches it: JSON-RPC messages on "
    "stdout, logs on stderr. It stops when stdin closes, or on SIGTERM/SIGINT."
)
_SERVE_DESCRIPTION = (
    "Run a daemon serving ACP over WebSocket at ws://HOST:PORT/acp (experimental: ACP "
    "defines no remote transport yet). Its sessions outlive "
    "connections: a client that reconnects finds them again. On SIGTERM/SIGINT it cancels "
    "the running turns, then exits."
)
_DEMO_DESCRIPTION = (
    "Start the agent on the embedded replay provider and drive one scripted session "
    "through it, printing what an editor would show."
)


def _runtime_arguments(acp: argparse.ArgumentParser) -> None:
    """The options that shape the runtime, alike for ``acp`` and ``serve``."""
    acp.add_argument(
        "--provider",
        choices=("anthropic", "openai", "replay"),
        default=None,
        help="the model API to stream from (default: anthropic if ANTHROPIC_API_KEY is set, "
        "else openai if OPENAI_API_KEY is set, else the embedded replay provider, which "
        "needs no key and no network)",
    )
    acp.add_argument(
        "--model",
        default=None,
        help="model name (default: "
        + ", ".join(f"{model} for {name}" for name, model in DEFAULT_MODELS.items())
        + ")",
    )
    acp.add_argument(
        "--fallback-model",
        action="append",
        default=[],
        metavar="M",
        help="model to fall back to when the previous one keeps failing (repeatable; "
        "default: none)",
    )
    acp.add_argument(
        "--context-window",
        type=int,
        default=None,
        metavar="TOKENS",
        help="context size of the models, for the editor's usage display and --compact-at "
        "(default: known per model name, else 128000)",
    )
    acp.add_argument(
        "--compact-at",
        type=float,
        default=DEFAULT_COMPACT_AT,
        metavar="FRACTION",
        help="summarise a session's older messages with the model once a request used this "
        "fraction of the context window, keeping the most recent quarter verbatim; 0 turns "
        f"it off (default {DEFAULT_COMPACT_AT:g})",
    )
    acp.add_argument(
        "--base-url",
        default=None,
        metavar="URL",
        help="provider base URL, e.g. any OpenAI-compatible server with --provider openai "
        "(default: the provider's own API)",
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
        metavar="N",
        default=8 * 1024 * 1024,
        help="largest JSON-RPC message either way: a bigger one received is answered with "
        "an error and skipped, a bigger card sent is cut to fit, with a note (default 8 MiB)",
    )
    acp.add_argument(
        "--mode",
        choices=MODES,
        default=None,
        help="the mode new sessions start in (an editor may switch it): ask = shell "
        "commands and MCP tools that change things ask first; accept_edits = file edits "
        "never ask, shell still does; plan = read-only tools only; auto = nothing asks "
        "(default ask)",
    )
    acp.add_argument(
        "--allow-shell",
        action="store_true",
        help="start sessions in auto mode, where no tool asks for permission (the same as "
        "--mode auto; default: ask the editor before each shell command)",
    )
    acp.add_argument(
        "--scrub-env",
        action="append",
        default=[],
        metavar="NAME",
        help="keep variable NAME out of tool subprocesses (repeatable; also "
        "TOOLPREP_SCRUB_ENV=A,B); provider keys, the serve token and names like "
        "*_TOKEN, *_KEY, *SECRET*, *PASSWORD*, AWS_* are always kept out (default: only those)",
    )
    acp.add_argument(
        "--pass-env",
        action="append",
        default=[],
        metavar="NAME",
        help="hand variable NAME to tool subprocesses and MCP servers although it looks "
        "like a secret (repeatable; also TOOLPREP_PASS_ENV=A,B); never the provider "
        "credentials or the serve token (default: none)",
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
        "--trust-mcp-server",
        action="append",
        default=[],
        metavar="NAME",
        help="take the word of the MCP server the client names NAME (its mcpServers entry's "
        "name) that a tool is read-only: such tools then run in plan mode and without asking "
        "in ask mode (repeatable; default: no server is trusted, so its tools ask in ask mode "
        "and are refused in plan mode whatever they claim)",
    )
    acp.add_argument(
        "--sandbox",
        choices=("auto", "on", "off"),
        default="auto",
        help="confine shell commands and stdio MCP servers with bubblewrap (bwrap): the "
        "system read-only, only the session's directory writable, a private /tmp, the data "
        "directory, other sessions' directories and credential files (~/.ssh, ~/.aws, ...) "
        "hidden, no network, resource limits. auto = when bwrap works here, saying so when "
        "it does not; on = refuse to start without it; off = run them unconfined "
        "(default auto)",
    )
    acp.add_argument(
        "--sandbox-network",
        action="store_true",
        help="let sandboxed commands and MCP servers use the network (default: none, not "
        "even loopback)",
    )
    acp.add_argument(
        "--sandbox-limit",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a resource limit of each sandboxed command, per process: processes=N (the "
        "kernel exempts root), memory=MiB (address space), cpu=SECONDS, file=MiB (largest "
        "file written); repeatable (default processes=4096, memory=32768, cpu=3600, "
        "file=16384)",
    )
    acp.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        default="auto",
        help="loop for the provider streams (and serve's connections): uvloop (pip install "
        "'toolprep[uvloop]') lowers tool-card latency under load; auto uses it when installed "
        "(default auto)",
    )
    acp.add_argument(
        "--log-level",
        default="WARNING",
        metavar="LEVEL",
        help="stderr log level: DEBUG, INFO, WARNING, ERROR (default WARNING)",
    )
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
        help="keep sessions in memory only: nothing is written, nothing can be loaded later "
        "(default: keep them in --data-dir)",
    )
    acp.add_argument(
        "--synchronous",
        choices=("normal", "full"),
        default="normal",
        help="how durable each stored write is: normal = survives the process crashing, "
        "but a power loss or OS crash may lose the last writes; full = survives that too, "
        "at an fsync per write (default normal)",
    )


def _acp_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    acp = sub.add_parser(
        "acp",
        help="run the ACP agent on stdio (what an editor launches)",
        description=_ACP_DESCRIPTION,
    )
    _runtime_arguments(acp)
    # An editor starts one agent per window: its sessions stay in this process unless asked.
    acp.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="spread sessions over N worker processes, each a whole runtime (default 1: "
        "every session in this process)",
    )


def _serve_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser(
        "serve",
        help="run a daemon serving ACP over WebSocket; its sessions outlive connections",
        description=_SERVE_DESCRIPTION,
    )
    _serve_arguments(serve)


def serve_option_parser() -> argparse.ArgumentParser:
    """``serve``'s options alone, raising ``argparse.ArgumentError`` instead of exiting: how
    ``connect`` reads the options it was given for a daemon (``runs_with``)."""
    serve = argparse.ArgumentParser(prog="toolprep serve", add_help=False, exit_on_error=False)
    _serve_arguments(serve)
    return serve


def _serve_arguments(serve: argparse.ArgumentParser) -> None:
    _runtime_arguments(serve)
    serve.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="spread sessions over N worker processes, each a whole runtime (default: one "
        "per core; 1 keeps every session in this process)",
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, loopback)"
    )
    serve.add_argument(
        "--port", type=int, default=8765, help="port (default 8765; 0 picks a free one)"
    )
    serve.add_argument(
        "--token-file",
        default=None,
        metavar="PATH",
        help="require 'Authorization: Bearer TOKEN', TOKEN being the first line of PATH "
        "(default: $TOOLPREP_TOKEN, else a random token; one of the two is required for a "
        "non-loopback --host). The address and token are written to serve.json in the "
        "data directory, readable by this user only",
    )
    serve.add_argument("--token", default=None, help=argparse.SUPPRESS)  # refused: see serve_token
    serve.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="let web pages of ORIGIN (scheme://host[:port]) connect; repeatable. By "
        "default a WebSocket upgrade carrying an Origin header (any browser's) is refused",
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
    add_connection_arguments(serve)
    _client_mcp_arguments(serve)
    serve.add_argument(
        "--ray",
        default=None,
        metavar="ADDRESS",
        help="run the sessions on shard actors of the Ray cluster at ADDRESS (auto, "
        "HOST:PORT); needs the ray extra: pip install 'toolprep[ray]' (default: no Ray, "
        "sessions run on this machine)",
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


def _connect_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    connect = sub.add_parser(
        "connect",
        help="bridge stdio to a running toolprep serve: the agent command an editor launches "
        "to use the daemon's sessions",
        description="Pass ACP messages unchanged between stdio (one per line) and the "
        "daemon's WebSocket (one per frame). Exit status: 0 when stdin ends, 1 when the daemon "
        "closes the connection or it breaks, 2 when no connection could be made.",
    )
    connect.add_argument(
        "--data-dir",
        default=None,
        metavar="DIR",
        help="find the daemon through the serve.json that `toolprep serve` wrote in DIR "
        "(default: $XDG_DATA_HOME/toolprep, else ~/.local/share/toolprep)",
    )
    connect.add_argument(
        "--url",
        default=None,
        help="connect to this ws:// URL instead of the one in serve.json, with the token "
        "from --token-file or $TOOLPREP_TOKEN (default: the URL in serve.json)",
    )
    connect.add_argument(
        "--token-file",
        default=None,
        metavar="PATH",
        help="with --url: the token is the first line of PATH (default: $TOOLPREP_TOKEN)",
    )
    connect.add_argument("--token", default=None, help=argparse.SUPPRESS)  # refused
    connect.add_argument(
        "--start",
        action="store_true",
        help="if no daemon answers, start `toolprep serve --data-dir DIR --port 0` detached "
        "(its own session, not a child of this process, so it outlives the editor and this "
        "process), its output appended to DIR/serve.log, and connect to it; its provider key "
        "comes from this environment (default: exit with status 2)",
    )
    connect.add_argument(
        "--start-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="with --start: how long the new daemon may take to write serve.json (default 60)",
    )
    connect.add_argument(
        "--max-message-bytes",
        type=int,
        default=None,
        metavar="N",
        help="largest message either way: a bigger one from the editor is answered with an "
        "error and not forwarded, a bigger one from the daemon ends the connection (default: "
        "the daemon's own --max-message-bytes, which it announces, so the two agree)",
    )
    connect.add_argument(
        "--reply-timeout",
        type=float,
        default=DEFAULT_REPLY_TIMEOUT_S,
        metavar="SECONDS",
        help="once stdin ends, how long to wait for the replies to the requests already sent "
        "before closing the connection without them (default "
        f"{DEFAULT_REPLY_TIMEOUT_S:g})",
    )
    connect.add_argument(
        "--log-level", default="WARNING", help="stderr log level (default WARNING)"
    )
    connect.add_argument(
        "serve_options",
        nargs="*",
        metavar="SERVE_OPTION",
        help="with --start, after --: options for the started daemon, e.g. "
        "`toolprep connect --start -- --workers 2` (default: none)",
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
        help="let clients start stdio MCP servers with any command (default: off)",
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
    demo = sub.add_parser(
        "demo",
        help="drive one scripted session through the agent and show it",
        description=_DEMO_DESCRIPTION,
    )
    demo.add_argument(
        "--json",
        action="store_true",
        help="print the raw frames instead (default: a readable transcript)",
    )
    demo.add_argument(
        "--replay",
        default=None,
        metavar="FILE",
        help="replay script to use (default: the embedded script)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="toolprep", description=_DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    _acp_parser(sub)
    _serve_parser(sub)
    _connect_parser(sub)
    _demo_parser(sub)
    return parser


_EXIT_BUDGET_S = 5.0
_STOP_POLL_S = 0.1


def _start_errors() -> tuple[type[Exception], ...]:
    """What building the host raises for options or files it cannot start from."""
    from toolprep.runtime.store import StoreError

    return (ValueError, OSError, SessionHostError, StoreError)


def check_arguments(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` or ``OSError`` for ``acp``/``serve`` options nothing could start
    from, before anything heavy is imported or started, so a refusal comes at once."""
    for name, least in (("workers", 1), ("shards", 1), ("max_sessions", 1)):
        value = getattr(args, name, None)
        if value is not None and value < least:
            raise ValueError(f"--{name.replace('_', '-')} must be >= {least}, got {value}")
    if args.max_line_bytes < 1:
        raise ValueError(f"--max-line-bytes must be >= 1, got {args.max_line_bytes}")
    port = getattr(args, "port", None)
    if port is not None and not 0 <= port <= 65535:
        raise ValueError(f"--port must be between 0 and 65535, got {port}")
    grace = getattr(args, "disconnect_grace", None)
    if grace is not None and not grace >= 0:  # also rejects NaN
        raise ValueError(f"--disconnect-grace must be >= 0 seconds, got {grace}")
    ray = getattr(args, "ray", None)
    if getattr(args, "shards", None) is not None and ray is None:
        raise ValueError("--shards goes with --ray ADDRESS; on one machine use --workers N")
    if ray is not None and args.workers is not None:
        raise ValueError("--workers does not go with --ray: --shards N says how many runtimes run")
    check_options(RuntimeOptions.from_arguments(args))


class ServeStart(NamedTuple):
    """What ``serve`` starts from once its options are checked."""

    token: ServeToken
    origins: frozenset[str]
    mcp_policy: McpPolicy


def check_serve_arguments(args: argparse.Namespace, environ: Mapping[str, str]) -> ServeStart:
    """Everything ``serve`` checks before it starts anything, in the order it refuses: the
    token first (one on the command line is refused whatever else is wrong), then the
    origins, then the other options. Raises ``ValueError`` or ``OSError``."""
    from toolprep.runtime.daemon.admission import parse_allowed_origin
    from toolprep.runtime.daemon.serve_token import (
        TOKEN_ON_COMMAND_LINE,
        check_token_for_host,
        serve_token,
    )

    if args.token is not None:
        raise ValueError(f"--token: {TOKEN_ON_COMMAND_LINE}")
    token = serve_token(args.token_file, environ)
    check_token_for_host(token, args.host)
    origins = frozenset(parse_allowed_origin(origin) for origin in args.allow_origin)
    check_arguments(args)
    check_connection_arguments(args)
    return ServeStart(token, origins, _client_mcp_policy(args))


def run_acp(args: argparse.Namespace) -> int:
    """Serve ACP on stdio until stdin ends or SIGTERM/SIGINT/SIGHUP, then exit 0.

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
    """The sessions' host from the runtime options: this process, or ``--workers`` processes
    (``serve`` leaves it unset: one per core).

    ``mcp_policy`` says which MCP servers clients may name; it travels with the options.

    Raises ``ValueError``, ``OSError``, ``SessionHostError`` or ``StoreError``
    for options it cannot be built from.
    """
    from toolprep.runtime.assembly import (
        check_options,
        default_data_dir,
        runtime_from_options,
        store_path,
    )
    from toolprep.runtime.store import SessionStore
    from toolprep.runtime.store.ownership import this_process
    from toolprep.runtime.store.private_files import make_private
    from toolprep.runtime.workers import WorkerHost, WorkerSpec, default_worker_count
    from toolprep.runtime.workers.codec import dump_options

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
    if workers == 1 and getattr(args, "ray", None) is None:
        runtime = runtime_from_options(options)
        if runtime.store is not None:
            # Before any session runs: what a killed predecessor left open gets its discard
            # (or, if the store cannot be written now, once it can).
            runtime.store.cards.close_open_cards()
        stop.on_force = runtime.kill_tool_processes_now
        return _Hosted(runtime, runtime if runtime.store is not None else None, runtime.store)
    front_store = SessionStore(path, synchronous=args.synchronous) if path is not None else None
    if front_store is not None:
        front_store.cards.close_open_cards()  # as above
    if getattr(args, "ray", None) is not None:
        return _ray_hosted(args, options, front_store, stop)
    spec = WorkerSpec(
        "toolprep.runtime.assembly:worker_runtime_from_options", dump_options(options)
    )
    worker_host = WorkerHost(spec, workers, store=front_store)
    stop.on_force = worker_host.kill_tool_processes_now
    return _Hosted(worker_host, worker_host if front_store is not None else None, front_store)


def _ray_hosted(
    args: argparse.Namespace,
    options: RuntimeOptions,
    store: SessionStore | None,
    stop: StopSignals,
) -> _Hosted:
    """``serve --ray``: the sessions on shard actors of a Ray cluster (the ``ray`` extra)."""
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
    configure_logging(args.log_level)
    try:
        check_arguments(args)
    except (ValueError, OSError) as exc:
        print(f"toolprep: {exc}", file=sys.stderr)
        return 2
    from toolprep.runtime.acp.agent import AcpAgent
    from toolprep.runtime.acp.jsonrpc_connection import JsonRpcConnection

    # stdout carries only protocol messages: anything printed by accident goes to stderr.
    protocol_out = sys.stdout.buffer
    sys.stdout = sys.stderr
    try:
        # The client is the editor that launched this process: its servers are the user's.
        hosted = _build_host(args, stop, McpPolicy.trusted())
    except _start_errors() as exc:
        print(f"toolprep: {exc}", file=sys.stderr)
        return 2
    # Unbuffered: the reader thread may still be blocked reading when the process exits,
    # and a buffered stream's lock held by it would abort interpreter shutdown.
    protocol_in = open(sys.stdin.fileno(), "rb", buffering=0, closefd=False)  # noqa: SIM115
    connection = JsonRpcConnection(protocol_in, protocol_out, max_line_bytes=args.max_line_bytes)
    agent = AcpAgent(hosted.host, connection, hosted.archive, meta=_agent_meta(args))
    tune_process_for_daemon()
    agent.serve(lambda: stop.requested)
    if hosted.store is not None:
        hosted.store.close()
    return 0


def _agent_meta(args: argparse.Namespace) -> dict[str, object]:
    """What ``initialize`` says under ``_meta.toolprep``: whether commands run sandboxed
    (logged once here when they cannot be)."""
    from toolprep.runtime.assembly import announce_sandbox

    return {"sandbox": announce_sandbox(RuntimeOptions.from_arguments(args)).to_meta()}


def run_serve(args: argparse.Namespace) -> int:
    """Serve ACP over WebSocket until SIGTERM/SIGINT/SIGHUP; then every running turn is cancelled
    (clients see the discards and their prompts answered) before the sockets close."""
    stop = StopSignals()
    stop.install()
    try:
        return _exit_within(_serve_daemon(args, stop), _EXIT_BUDGET_S)
    finally:
        stop.restore()


def _serve_daemon(args: argparse.Namespace, stop: StopSignals) -> int:
    from toolprep.runtime.daemon.discovery import (
        DaemonAddress,
        daemon_file_path,
        remove_daemon_file,
        write_daemon_file,
    )

    configure_logging(args.log_level)
    try:
        token, origins, mcp_policy = check_serve_arguments(args, os.environ)
        # Held (not in the environment a child inherits): workers get it over their pipe,
        # and the tools' environment policy keeps it (and any copy of its value) out of
        # every tool and MCP server, and masks it in their output.
        hold_secret(SERVE_TOKEN_VARIABLE, token.value)
        hosted = _build_host(args, stop, mcp_policy)
    except _start_errors() as exc:
        print(f"toolprep: {exc}", file=sys.stderr)
        return 2
    from toolprep.runtime.daemon.limits import default_max_connections, raise_open_files_limit
    from toolprep.runtime.daemon.server import AcpServer
    from toolprep.runtime.daemon.session_pool import SessionPool

    open_files, _ = raise_open_files_limit()
    max_connections = args.max_connections or default_max_connections(open_files)
    logging.getLogger(__name__).info(
        "open files limit %d: at most %d connections", open_files, max_connections
    )

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
            token=token.value,
            allowed_origins=origins,
            max_message_bytes=args.max_line_bytes,
            max_connections=max_connections,
            max_buffered_bytes=args.max_send_buffer,
            ping_interval_s=args.ping_interval or None,
            ping_timeout_s=args.ping_timeout or None,
            event_loop=args.event_loop,
            agent_meta=_agent_meta(args),
        )
    except (ValueError, OSError) as exc:
        pool.shutdown()
        from toolprep.runtime.daemon.port_holder import port_in_use_message

        taken = port_in_use_message(args.host, args.port, exc) if isinstance(exc, OSError) else None
        print(f"toolprep: {taken or exc}", file=sys.stderr)
        return 2
    # Listening before the daemon file is written, so that a failure can shut the server
    # down (its shutdown waits for serve_forever).
    listener = threading.Thread(target=server.serve_forever, name="toolprep-listener", daemon=True)
    listener.start()
    data_dir, pid = _daemon_data_dir(args), os.getpid()
    if hosted.store is None:  # else made private before the store opened (``_build_host``)
        from toolprep.runtime.store.private_files import make_private

        make_private(data_dir)
    address = DaemonAddress(server.url, token.value, pid, _runs_with(args, token.value))
    try:
        address_file = write_daemon_file(data_dir, address)
        where = f"address and token in {address_file}"
    except OSError as exc:
        if token.source == "generated":  # nobody could learn the token: useless to serve
            server.shutdown()
            pool.shutdown()
            print(f"toolprep: cannot write the daemon file in {data_dir}: {exc}", file=sys.stderr)
            return 2
        # A full or read-only data directory: clients given the URL and token still connect.
        where = f"no daemon file: cannot write {daemon_file_path(data_dir)}: {exc.strerror}"
    print(f"toolprep: serving ACP on {server.url} ({where})", file=sys.stderr, flush=True)
    tune_process_for_daemon()
    while not stop.requested:
        time.sleep(_STOP_POLL_S)
    logging.getLogger(__name__).info("stop requested: ending the running turns")
    pool.shutdown()
    server.shutdown()
    remove_daemon_file(data_dir, pid)
    if hosted.store is not None:
        hosted.store.close()
    return 0


def _runs_with(args: argparse.Namespace, token: str) -> RunsWith:
    """What the sessions stream from, for ``serve.json``: clients compare it with what they
    ask for (``runs_with``); the key only as a check keyed with the daemon's token."""
    from toolprep.runtime.daemon.runs_with import RunsWith

    settings = resolve_settings(
        provider=args.provider, model=args.model, base_url=args.base_url, env=os.environ
    )
    return RunsWith.of(settings, token)


def _daemon_data_dir(args: argparse.Namespace) -> Path:
    """Where the daemon file goes: ``--data-dir``, else the default one (even with
    ``--no-persist``: clients look for the file there)."""
    from toolprep.runtime.assembly import default_data_dir

    chosen = Path(args.data_dir) if args.data_dir is not None else default_data_dir()
    return chosen.expanduser().resolve()


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


RAY_NATIVE_VARIABLES = ("RAY_AUTH_TOKEN",)
"""Secrets ``serve --ray`` leaves in its C environment: Ray's native code reads them there."""


def _protect(args: argparse.Namespace) -> None:
    """``protect_process`` before anything is started: no other process of the user reads
    this one's memory, and its environment block and command line hold no secret."""
    from toolprep.runtime.config import scrubbed_variable_names
    from toolprep.runtime.process_secrets import protect_process
    from toolprep.runtime.tools.environment import url_password

    try:
        scrubbed = scrubbed_variable_names(getattr(args, "scrub_env", ()))
    except ValueError:  # refused with its message once the options are checked
        scrubbed = frozenset()
    password = url_password(getattr(args, "base_url", None))
    # Ray's native client reads the cluster's token with getenv when it connects.
    kept = RAY_NATIVE_VARIABLES if getattr(args, "ray", None) is not None else ()
    protect_process(scrubbed=scrubbed, command_line=[password] if password else [], kept=kept)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _protect(args)
    if args.command == "acp":
        return run_acp(args)
    if args.command == "serve":
        return run_serve(args)
    if args.command == "connect":
        from toolprep.runtime.daemon.connect import run_connect

        return run_connect(args)
    from toolprep.runtime.demo import run_demo

    return run_demo(json_output=args.json, replay_file=args.replay)


if __name__ == "__main__":
    sys.exit(main())
