"""``toolprep serve``: the daemon serving ACP over WebSocket, its sessions outliving
connections; and its options, which ``connect --start`` reads too."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from toolprep.runtime.cli.hosting import Hosted, agent_meta, build_host, run_until_stopped
from toolprep.runtime.cli.options import check_arguments, runtime_arguments, start_errors
from toolprep.runtime.daemon.daemon_lock import DataDirInUse, lock_data_dir
from toolprep.runtime.daemon.log_keeper import (
    DEFAULT_LOG_BACKUPS,
    DEFAULT_LOG_MAX_BYTES,
    check_log_bounds,
    keep_output,
)
from toolprep.runtime.daemon.serve_options import (
    add_connection_arguments,
    check_connection_arguments,
)
from toolprep.runtime.daemon.session_pool import (
    DEFAULT_GRACE_S,
    DEFAULT_MAX_DETACHED_S,
    DETACHED_TURNS,
)
from toolprep.runtime.daemon.shared_session import DEFAULT_FRAME_CACHE_BYTES, StoredFrameCache
from toolprep.runtime.hosting.assembly import configure_logging
from toolprep.runtime.hosting.model_routes import resolve_provider_config
from toolprep.runtime.mcp.policy import McpPolicy
from toolprep.runtime.process.secrets import hold_secret
from toolprep.runtime.process.stop_signals import StopSignals
from toolprep.runtime.process.tuning import tune_process_for_daemon
from toolprep.runtime.tools.environment import SERVE_TOKEN_VARIABLE

if TYPE_CHECKING:
    from toolprep.runtime.daemon.runs_with import RunsWith
    from toolprep.runtime.daemon.serve_token import ServeToken
    from toolprep.runtime.store.retention import Retention
    from toolprep.runtime.telemetry.health import Readiness
    from toolprep.runtime.telemetry.setup import Telemetry

__all__ = [
    "ServeStart",
    "add_serve_command",
    "check_serve_arguments",
    "run_serve",
    "serve_arguments",
    "serve_option_parser",
]

_SERVE_DESCRIPTION = (
    "Run a daemon serving ACP over WebSocket at ws://HOST:PORT/acp (experimental: ACP "
    "defines no remote transport yet). Its sessions outlive "
    "connections: a client that reconnects finds them again. On SIGTERM/SIGINT it cancels "
    "the running turns, then exits."
)


def add_serve_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser(
        "serve",
        help="run a daemon serving ACP over WebSocket; its sessions outlive connections",
        description=_SERVE_DESCRIPTION,
    )
    serve_arguments(serve)


def serve_option_parser() -> argparse.ArgumentParser:
    """``serve``'s options alone, raising ``argparse.ArgumentError`` instead of exiting: how
    ``connect`` reads the options it was given for a daemon (``runs_with``)."""
    serve = argparse.ArgumentParser(prog="toolprep serve", add_help=False, exit_on_error=False)
    serve_arguments(serve)
    return serve


def serve_arguments(serve: argparse.ArgumentParser) -> None:
    """Every option of ``serve``: the runtime's, then the daemon's own."""
    runtime_arguments(serve)
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
        help="with --detached-turns cancel, how long a running turn goes on once its last "
        f"client is gone; also --idle-evict's default (default {DEFAULT_GRACE_S:g})",
    )
    serve.add_argument(
        "--idle-evict",
        type=float,
        default=None,
        metavar="SECONDS",
        help="evict a session from memory once it has been idle with no client attached this "
        "long: its frames, history and provider state are freed, it stays stored, and a load "
        "or resume brings it back (default: --disconnect-grace)",
    )
    serve.add_argument(
        "--frame-cache-bytes",
        type=int,
        default=DEFAULT_FRAME_CACHE_BYTES,
        metavar="N",
        help="compressed frames of finished turns a live session keeps for replays; older "
        f"ones are read back from the store (default {DEFAULT_FRAME_CACHE_BYTES}; without a "
        "store every frame is kept while the session is live)",
    )
    serve.add_argument(
        "--detached-turns",
        choices=DETACHED_TURNS,
        default="continue",
        help="what becomes of a running turn once its last client is gone: it goes on to its "
        "end (a permission it asks for waits for the next client), or it is cancelled after "
        "--disconnect-grace (default continue)",
    )
    serve.add_argument(
        "--max-detached",
        type=float,
        default=DEFAULT_MAX_DETACHED_S,
        metavar="SECONDS",
        help="cancel a turn that has gone on this long with no client attached, saying why in "
        f"the session (default {DEFAULT_MAX_DETACHED_S:g})",
    )
    serve.add_argument(
        "--retain-days",
        type=float,
        default=None,
        metavar="DAYS",
        help="delete stored sessions nobody has updated for DAYS days (never one a client is "
        "attached to or a turn runs in), at start and every hour, and give their space back "
        "(default: keep every session)",
    )
    add_connection_arguments(serve)
    serve.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="also serve GET /metrics without a token on 127.0.0.1:PORT, for a scraper on "
        "this machine (0 picks a free one; default: only on the ACP address, with the "
        "token). Metrics need the telemetry extra: pip install 'toolprep[telemetry]'",
    )
    _client_mcp_arguments(serve)
    _log_arguments(serve)
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


def _log_arguments(serve: argparse.ArgumentParser) -> None:
    """Where the daemon's output goes: stderr, or files rotated by size (``log_keeper``)."""
    serve.add_argument(
        "--log-file",
        default=None,
        metavar="PATH",
        help="write everything the daemon and its workers print (logs, and what a crash "
        "writes) to PATH, rotated by size by a small process of its own that outlives a "
        "crash (default: stderr, for a terminal or a service manager; connect --start "
        "passes DIR/serve.log)",
    )
    serve.add_argument(
        "--log-max-bytes",
        type=int,
        default=DEFAULT_LOG_MAX_BYTES,
        metavar="BYTES",
        help="with --log-file: start PATH afresh before it grows past BYTES, the full one "
        f"becoming PATH.1 (default {DEFAULT_LOG_MAX_BYTES})",
    )
    serve.add_argument(
        "--log-backups",
        type=int,
        default=DEFAULT_LOG_BACKUPS,
        metavar="N",
        help="with --log-file: keep N full files, PATH.1 (newest) to PATH.N, so the log never "
        f"takes more than (N + 1) x BYTES (default {DEFAULT_LOG_BACKUPS})",
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
    check_log_bounds(args.log_max_bytes, args.log_backups)
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        raise ValueError(f"--metrics-port must be a port (0-65535), got {args.metrics_port}")
    return ServeStart(token, origins, _client_mcp_policy(args))


def run_serve(args: argparse.Namespace) -> int:
    """Serve ACP over WebSocket until SIGTERM/SIGINT/SIGHUP; then every running turn is cancelled
    (clients see the discards and their prompts answered) before the sockets close.

    With ``--log-file``, its output goes to the log keeper first (``log_keeper``), so even
    a refusal to start is in the log; at a clean exit the keeper is given time to write
    the rest (a crash leaves it to finish by itself)."""
    if args.log_file is None:
        return run_until_stopped(lambda stop: _serve_daemon(args, stop))
    try:
        log_file = Path(args.log_file).expanduser().absolute()
        kept = keep_output(log_file, args.log_max_bytes, args.log_backups)
    except (ValueError, OSError) as exc:
        print(f"toolprep: --log-file {args.log_file}: {exc}", file=sys.stderr)
        return 2
    code = run_until_stopped(lambda stop: _serve_daemon(args, stop))
    kept.drain()
    return code


class _NoDaemonFile(Exception):
    """The daemon file could not be written and nobody else can learn the token."""


def _serve_daemon(args: argparse.Namespace, stop: StopSignals) -> int:
    configure_logging(args.log_level)
    try:
        token, origins, mcp_policy = check_serve_arguments(args, os.environ)
        # Held (not in the environment a child inherits): workers get it over their pipe,
        # and the tools' environment policy keeps it (and any copy of its value) out of
        # every tool and MCP server, and masks it in their output.
        hold_secret(SERVE_TOKEN_VARIABLE, token.value)
    except start_errors() as exc:
        print(f"toolprep: {exc}", file=sys.stderr)
        return 2
    try:  # before the store opens or a worker starts: one data directory, one daemon
        lock = lock_data_dir(_daemon_data_dir(args))
    except DataDirInUse as exc:
        print(f"toolprep: {exc}", file=sys.stderr)
        return 2
    try:
        return _serve_locked(args, stop, token, origins, mcp_policy)
    finally:
        lock.release()  # after its serve.json is gone: a next daemon may start


def _serve_locked(
    args: argparse.Namespace,
    stop: StopSignals,
    token: ServeToken,
    origins: frozenset[str],
    mcp_policy: McpPolicy,
) -> int:
    telemetry = _start_telemetry()
    try:
        try:
            hosted = build_host(args, stop, mcp_policy, telemetry.observer, serves_metrics=True)
        except start_errors() as exc:
            print(f"toolprep: {exc}", file=sys.stderr)
            return 2
        _observe_host(telemetry, hosted)
        return _serve_hosted(args, stop, hosted, token, origins, mcp_policy, telemetry)
    finally:
        telemetry.shutdown()


def _start_telemetry() -> Telemetry:
    """Metrics for ``/metrics`` (always asked for) and OTLP if the ``OTEL_*`` variables say
    so; started before the host, whose runtime reports its turns to it."""
    from toolprep.runtime.telemetry.setup import Unavailable, telemetry_from_environ

    telemetry = telemetry_from_environ(prometheus=True, role="daemon")
    page = None if telemetry.on else telemetry.page()
    if isinstance(page, Unavailable):
        logging.getLogger(__name__).warning("/metrics serves no metrics: %s", page.reason)
    return telemetry


def _observe_host(telemetry: Telemetry, hosted: Hosted) -> None:
    """Worker restarts, and the metrics of the turns the workers run, are read from a
    worker host."""
    from toolprep.runtime.workers import WorkerHost

    host = hosted.host
    if isinstance(host, WorkerHost):
        telemetry.metrics.observe_worker_restarts(lambda: host.restarts)
        telemetry.gather_workers(host.read_worker_metrics)


def _readiness(hosted: Hosted) -> Readiness:
    """``/readyz``: the store writable, and every worker up when the sessions run in workers."""
    from toolprep.runtime.telemetry.health import readiness
    from toolprep.runtime.workers import WorkerHost

    host = hosted.host
    if isinstance(host, WorkerHost):
        return readiness(hosted.store, host.worker_pids, len(host.worker_pids()))
    return readiness(hosted.store)


def _serve_hosted(
    args: argparse.Namespace,
    stop: StopSignals,
    hosted: Hosted,
    token: ServeToken,
    origins: frozenset[str],
    mcp_policy: McpPolicy,
    telemetry: Telemetry,
) -> int:
    from toolprep.runtime.daemon.discovery import remove_daemon_file
    from toolprep.runtime.daemon.limits import default_max_connections, raise_open_files_limit
    from toolprep.runtime.daemon.websocket_serving import serve_websocket

    open_files, _ = raise_open_files_limit()
    max_connections = args.max_connections or default_max_connections(open_files)
    logging.getLogger(__name__).info(
        "open files limit %d: at most %d connections", open_files, max_connections
    )
    data_dir, pid = _daemon_data_dir(args), os.getpid()
    listening: list[str] = []  # the URL, once the server listens
    retention = _retention(args, hosted)

    def announce(url: str) -> None:
        listening.append(url)
        _announce(args, hosted, token, url, data_dir)
        if retention is not None:
            retention.start()  # sweeps now, then every hour

    try:
        serve_websocket(
            hosted.host,
            hosted.archive,
            token=token.value,
            host=args.host,
            port=args.port,
            allowed_origins=origins,
            mcp_policy=mcp_policy,
            max_sessions=args.max_sessions,
            disconnect_grace_s=args.disconnect_grace,
            detached_turns=args.detached_turns,
            max_detached_s=args.max_detached,
            idle_evict_s=args.idle_evict,
            frame_cache=_frame_cache(args, hosted),
            max_message_bytes=args.max_line_bytes,
            max_connections=max_connections,
            max_buffered_bytes=args.max_send_buffer,
            ping_interval_s=args.ping_interval or None,
            ping_timeout_s=args.ping_timeout or None,
            event_loop=args.event_loop,
            meta=agent_meta(args),
            stop_requested=lambda: stop.requested,
            on_listening=announce,
            telemetry=telemetry,
            ready=_readiness(hosted),
            metrics_port=args.metrics_port,
            on_metrics_listening=_announce_metrics,
        )
    except _NoDaemonFile as exc:
        print(f"toolprep: {exc}", file=sys.stderr)
        return 2
    except (ValueError, OSError) as exc:
        if listening:  # not a refusal to listen: a failure while serving
            raise
        print(f"toolprep: {_listen_failure(args, exc)}", file=sys.stderr)
        return 2
    remove_daemon_file(data_dir, pid)
    if retention is not None:
        retention.stop()
    if hosted.store is not None:
        hosted.store.close()
    return 0


def _frame_cache(args: argparse.Namespace, hosted: Hosted) -> StoredFrameCache | None:
    """The bound on live sessions' kept frames; None without a store (they are the log)."""
    if hosted.store is None:
        return None
    return StoredFrameCache(hosted.store.frame_log, args.frame_cache_bytes)


def _retention(args: argparse.Namespace, hosted: Hosted) -> Retention | None:
    """The sweeps ``--retain-days`` asks for; None without it (or without a store)."""
    if args.retain_days is None or hosted.store is None:
        return None
    from toolprep.runtime.store.retention import Retention

    return Retention(hosted.store, args.retain_days * 86400)


def _announce_metrics(url: str) -> None:
    print(f"toolprep: serving metrics without a token on {url}", file=sys.stderr, flush=True)


def _listen_failure(args: argparse.Namespace, exc: ValueError | OSError) -> str:
    """Why the server could not listen: who holds the port, when that is known."""
    from toolprep.runtime.daemon.metrics_port import MetricsPortUnavailable
    from toolprep.runtime.daemon.port_holder import port_in_use_message

    if isinstance(exc, MetricsPortUnavailable):
        return str(exc)

    taken = port_in_use_message(args.host, args.port, exc) if isinstance(exc, OSError) else None
    return taken or str(exc)


def _announce(
    args: argparse.Namespace, hosted: Hosted, token: ServeToken, url: str, data_dir: Path
) -> None:
    """Once listening: write the daemon file clients find the daemon by, and say where.

    Raises ``_NoDaemonFile`` when it cannot be written and the token was generated: nobody
    could learn it, so serving would be useless.
    """
    from toolprep.runtime.daemon.discovery import (
        DaemonAddress,
        daemon_file_path,
        write_daemon_file,
    )

    if hosted.store is None:  # else made private before the store opened (``build_host``)
        from toolprep.runtime.store.private_files import make_private

        make_private(data_dir)
    address = DaemonAddress(url, token.value, os.getpid(), _runs_with(args, token.value))
    try:
        address_file = write_daemon_file(data_dir, address)
        where = f"address and token in {address_file}"
    except OSError as exc:
        if token.source == "generated":  # nobody could learn the token: useless to serve
            raise _NoDaemonFile(f"cannot write the daemon file in {data_dir}: {exc}") from exc
        # A full or read-only data directory: clients given the URL and token still connect.
        where = f"no daemon file: cannot write {daemon_file_path(data_dir)}: {exc.strerror}"
    print(f"toolprep: serving ACP on {url} ({where})", file=sys.stderr, flush=True)
    tune_process_for_daemon()


def _runs_with(args: argparse.Namespace, token: str) -> RunsWith:
    """What the sessions stream from, for ``serve.json``: clients compare it with what they
    ask for (``runs_with``); the key only as a check keyed with the daemon's token."""
    from toolprep.runtime.daemon.runs_with import RunsWith

    settings = resolve_provider_config(
        provider=args.provider, model=args.model, base_url=args.base_url, env=os.environ
    )
    return RunsWith.of(settings, token)


def _daemon_data_dir(args: argparse.Namespace) -> Path:
    """Where the daemon file goes: ``--data-dir``, else the default one (even with
    ``--no-persist``: clients look for the file there)."""
    from toolprep.runtime.hosting.assembly import default_data_dir

    chosen = Path(args.data_dir) if args.data_dir is not None else default_data_dir()
    return chosen.expanduser().resolve()
