"""``toolprep connect``: what an editor launches to talk to a running ``toolprep serve``.

Editors start ACP agents on stdio only, so this process stands in for the
agent: it finds the daemon, opens its WebSocket and passes messages both
ways unchanged (``bridge``). The daemon is found through the ``serve.json``
it wrote in its data directory (URL and token), or named with ``--url``,
the token then coming from ``--token-file`` or ``TOOLPREP_TOKEN``: never
from the command line, which every process of the machine can read.

stdout carries protocol messages only. Anything that keeps the bridge from
starting, or ends it from the daemon's side, is one line on stderr and a
non-zero status, so the editor shows why its agent is gone: 2 when no
connection could be made, 1 when the daemon closed it or it broke.

The daemon proves it holds the token before anything goes out
(``daemon_proof``): the upgrade carries a challenge, not the token, and
neither the bridge's proof nor any editor message is sent to a program that
cannot answer it. ``serve.json`` is used only if nobody else could have
written it (``discovery.read_trusted_daemon_file``); one that names a daemon
no longer there (its pid gone, nothing listening, or a listener that does
not prove the token: perhaps another user's, on a port the dead daemon
left) is removed, never used, and ``--start`` starts a fresh daemon.

A daemon runs with the provider settings of the process that started it.
A ``connect`` that finds one running whose settings differ from what its
own options after ``--`` and its environment ask for (``runs_with``) still
joins it, and says so: one line on stderr, and a notice in every session it
opens, naming what differs and how to get what it asked for.
"""

from __future__ import annotations

import argparse
import http
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI
from websockets.sync.client import ClientConnection, connect

from toolprep.runtime.acp.jsonrpc_transport import DEFAULT_MAX_LINE_BYTES
from toolprep.runtime.daemon.autostart import (
    SERVE_LOG,
    StartFailed,
    daemon_running,
    start_daemon,
    starting_alone,
)
from toolprep.runtime.daemon.bridge import run_bridge
from toolprep.runtime.daemon.daemon_lock import data_dir_in_use
from toolprep.runtime.daemon.daemon_proof import BridgeChallenge
from toolprep.runtime.daemon.discovery import (
    DaemonAddress,
    DaemonFile,
    DaemonFileError,
    DaemonFileUntrusted,
    read_trusted_daemon_file,
    remove_stale_daemon_file,
)
from toolprep.runtime.daemon.message_limit import announced_limit
from toolprep.runtime.daemon.runs_with import Asked, differences
from toolprep.runtime.daemon.serve_token import TOKEN_ON_COMMAND_LINE, TOKEN_VARIABLE, serve_token
from toolprep.runtime.hosting.assembly import configure_logging, default_data_dir
from toolprep.runtime.process.stop_signals import StopSignals

__all__ = ["ConnectFailed", "run_connect"]

logger = logging.getLogger(__name__)

_PREFIX: Final = "toolprep connect: "
_OPEN_TIMEOUT_S: Final = 30.0


class ConnectFailed(Exception):
    """No connection to the daemon: the one line to print."""


_Absence = Literal["no-daemon-file", "daemon-gone", "nothing-listening", "not-the-daemon"]


class _NoDaemon(ConnectFailed):
    """Nothing answers where the daemon should be: what ``--start`` remedies."""

    def __init__(self, message: str, absence: _Absence) -> None:
        super().__init__(message)
        self.absence = absence


@dataclass(frozen=True, slots=True)
class _Target:
    url: str
    token: str
    token_from: str
    """Where the token was read, for the message when the daemon refuses it."""
    daemon: DaemonAddress | None = None
    """The daemon file it came from, if any: what the daemon runs with. The daemon must
    then prove the token for this very URL."""
    found: DaemonFile | None = None
    """The file read, when found there: removed if the daemon it names is gone."""


@dataclass(frozen=True, slots=True)
class _Joined:
    """The open connection, and the notice for its sessions when the daemon runs with other
    settings than this connect asks for."""

    socket: ClientConnection
    notice: str | None = None


def run_connect(args: argparse.Namespace) -> int:
    """Bridge stdio to the daemon until either side ends; the exit status."""
    configure_logging(args.log_level)
    # stdout carries only protocol messages: anything printed by accident goes to stderr.
    protocol_out = sys.stdout.buffer
    sys.stdout = sys.stderr
    stop = StopSignals()
    stop.install()
    try:
        try:
            joined = _open(args, os.environ)
        except ConnectFailed as exc:
            print(f"{_PREFIX}{exc}", file=sys.stderr, flush=True)
            return 2
        # Unbuffered: the stdin thread may still be blocked reading when the process exits,
        # and a buffered stream's lock held by it would abort interpreter shutdown.
        protocol_in = open(sys.stdin.fileno(), "rb", buffering=0, closefd=False)  # noqa: SIM115
        outcome = run_bridge(
            joined.socket,
            protocol_in,
            protocol_out,
            _message_limit(joined.socket, args.max_message_bytes),
            lambda: stop.requested,
            reply_timeout_s=args.reply_timeout,
            notice=joined.notice,
        )
        if outcome.detail:
            print(f"{_PREFIX}{outcome.detail}", file=sys.stderr, flush=True)
        return outcome.exit_status
    finally:
        stop.restore()


def _message_limit(socket: ClientConnection, chosen: int | None) -> int:
    """The limit on editor lines: ``--max-message-bytes`` if given, else the one the daemon
    announced in its handshake response (the default, for a daemon that announces none)."""
    if chosen is not None:
        return chosen
    response = socket.response
    announced = announced_limit(response.headers if response is not None else None)
    return announced if announced is not None else DEFAULT_MAX_LINE_BYTES


def _open(args: argparse.Namespace, environ: Mapping[str, str]) -> _Joined:
    """The open WebSocket to the daemon, started first with ``--start`` if none answers."""
    if args.token is not None:
        raise ConnectFailed(f"--token: {TOKEN_ON_COMMAND_LINE}")
    if args.max_message_bytes is not None and args.max_message_bytes < 1:
        raise ConnectFailed(f"--max-message-bytes must be >= 1, got {args.max_message_bytes}")
    if not args.reply_timeout >= 0:  # also rejects NaN
        raise ConnectFailed(f"--reply-timeout must be >= 0 seconds, got {args.reply_timeout}")
    data_dir = _data_dir(args.data_dir)
    if args.url is not None:
        if args.start:
            raise ConnectFailed(
                "--start goes without --url: it starts the daemon of the data directory"
            )
        return _Joined(_handshake(_named_target(args.url, args.token_file, environ), args))
    if args.token_file is not None:
        raise ConnectFailed(
            f"--token-file goes with --url: the daemon's own token is read from its "
            f"serve.json in {data_dir}"
        )
    if args.serve_options and not args.start:
        raise ConnectFailed(
            f"unexpected arguments {' '.join(args.serve_options)}: options after -- are "
            "for the daemon --start starts"
        )
    try:
        return _joined(_discovered_target(data_dir, args), args, data_dir, environ)
    except _NoDaemon as absent:
        if not args.start:
            raise
        logger.info("no daemon answers (%s): starting one", absent.absence)
    try:
        with starting_alone(data_dir):
            try:  # started by another connect --start while this one waited?
                return _joined(_discovered_target(data_dir, args), args, data_dir, environ)
            except _NoDaemon:
                pass
            in_use = data_dir_in_use(data_dir)
            if in_use is not None:  # it would only refuse to start: say why instead
                raise ConnectFailed(f"--start: not started: {in_use}")
            address = start_daemon(data_dir, args.serve_options, environ, args.start_timeout)
    except (StartFailed, OSError) as exc:
        raise ConnectFailed(f"--start: {exc}") from None
    print(
        f"{_PREFIX}started toolprep serve (pid {address.pid}) on {address.url}; "
        f"its log: {data_dir / SERVE_LOG}",
        file=sys.stderr,
        flush=True,
    )
    started = _Target(address.url, address.token, "serve.json", address)
    return _Joined(_handshake(started, args))


def _joined(
    target: _Target, args: argparse.Namespace, data_dir: Path, environ: Mapping[str, str]
) -> _Joined:
    """The connection to a daemon found running; if it runs with other provider settings
    than this connect asks for, the line on stderr says so, and the notice will."""
    socket = _handshake(target, args)
    if target.daemon is None or target.daemon.runs_with is None:
        return _Joined(socket)
    asked = _asked(args.serve_options, environ)
    if isinstance(asked, str):
        print(f"{_PREFIX}{asked}", file=sys.stderr, flush=True)
        return _Joined(socket)
    differ = differences(target.daemon.runs_with, asked, target.token)
    if not differ:
        return _Joined(socket)
    pid = target.daemon.pid
    what = (
        f"the toolprep serve already running for {data_dir} (pid {pid}) runs with other "
        f"provider settings than this connect asks for: {'; '.join(differ)}"
    )
    remedy = (
        f"to use them, stop that daemon (kill {pid}) and run `toolprep connect --start` with "
        "them again, or pass another --data-dir to start a daemon of their own; a daemon's "
        "key goes in the environment of the command that starts it"
    )
    print(
        f"{_PREFIX}{what}. Connected to it all the same: {remedy}",
        file=sys.stderr,
        flush=True,
    )
    notice = f"toolprep: {what}. This session runs with the daemon's settings; {remedy}."
    return _Joined(socket, notice)


def _asked(serve_options: list[str], environ: Mapping[str, str]) -> Asked | str:
    """What the options after ``--`` and the environment ask for; or, if the options are
    not ``serve``'s, the line saying so."""
    from toolprep.runtime.cli.serve import serve_option_parser
    from toolprep.runtime.hosting.model_routes import default_provider, resolve_provider_config

    try:
        options, _ = serve_option_parser().parse_known_args(serve_options)
        settings = resolve_provider_config(
            provider=options.provider,
            model=options.model,
            base_url=options.base_url,
            env=environ,
        )
    except (argparse.ArgumentError, ValueError) as exc:
        return (
            f"the options after -- are not toolprep serve's ({exc}); a daemon already runs, "
            "so they were not used either way"
        )
    return Asked(
        settings,
        provider_named=options.provider is not None or default_provider(environ) != "replay",
        model_named=options.model is not None,
        base_url_named=options.base_url is not None,
    )


def _data_dir(chosen: str | None) -> Path:
    """``--data-dir``, else the default ``toolprep serve`` uses, resolved alike."""
    path = Path(chosen) if chosen is not None else default_data_dir()
    return path.expanduser().resolve()


def _named_target(url: str, token_file: str | None, environ: Mapping[str, str]) -> _Target:
    try:
        token = serve_token(token_file, environ)
    except ValueError as exc:
        raise ConnectFailed(str(exc)) from None
    match token.source:
        case "token-file":
            return _Target(url, token.value, f"--token-file {token_file}")
        case "environment":
            return _Target(url, token.value, TOKEN_VARIABLE)
        case "generated":
            raise ConnectFailed(
                f"--url needs the daemon's token: --token-file PATH or {TOKEN_VARIABLE}"
            )


def _discovered_target(data_dir: Path, args: argparse.Namespace) -> _Target:
    """The daemon ``serve.json`` names, if it is to be trusted and its daemon still runs.

    An untrusted file is refused (``--start`` does not replace it: the user looks first);
    one whose daemon is gone is removed (``_NoDaemon``, which ``--start`` remedies).
    """
    try:
        found = read_trusted_daemon_file(data_dir)
    except DaemonFileUntrusted as exc:
        raise ConnectFailed(str(exc)) from None
    except DaemonFileError as exc:
        raise _NoDaemon(f"{exc} ({_how_to_start(args)})", "no-daemon-file") from None
    address = found.address
    if not daemon_running(address.pid):
        raise _stale(
            found,
            f"the daemon named in {found.path} (pid {address.pid}) is not running",
            "daemon-gone",
            args,
        )
    return _Target(address.url, address.token, f"serve.json in {data_dir}", address, found)


def _stale(found: DaemonFile, what: str, absence: _Absence, args: argparse.Namespace) -> _NoDaemon:
    """Remove the stale daemon file (if it is still the one read); the failure saying so."""
    removed = remove_stale_daemon_file(found)
    done = "removed that stale file" if removed else "a newer file has replaced it since"
    return _NoDaemon(f"{what}: {done} ({_how_to_start(args)})", absence)


def _how_to_start(args: argparse.Namespace) -> str:
    if args.url is not None:
        return "start it with `toolprep serve`"
    serve = "toolprep serve"
    if args.data_dir is not None:
        serve += f" --data-dir {args.data_dir}"
    return f"start it with `{serve}`, or pass --start"


def _handshake(target: _Target, args: argparse.Namespace) -> ClientConnection:
    """The WebSocket open and both sides proven (``daemon_proof``), or ``ConnectFailed``
    saying why not. Nothing is sent before the daemon's proof is checked but the upgrade
    request and its fresh nonce; the bridge's own proof goes out right after."""
    challenge = BridgeChallenge.fresh(target.token)
    try:
        socket = connect(
            target.url,
            additional_headers=challenge.request_headers(),
            max_size=args.max_message_bytes,
            compression=None,
            open_timeout=_OPEN_TIMEOUT_S,
            legacy=True,
        )
    except ConnectionRefusedError:
        what = f"connection refused: nothing is listening at {target.url}"
        if target.found is not None:
            raise _stale(target.found, what, "nothing-listening", args) from None
        raise _NoDaemon(f"{what} ({_how_to_start(args)})", "nothing-listening") from None
    except InvalidURI as exc:
        raise ConnectFailed(f"{target.url} is not a WebSocket URL: {exc}") from None
    except InvalidStatus as exc:
        busy = exc.response.status_code == http.HTTPStatus.SERVICE_UNAVAILABLE
        if target.found is not None and not busy:
            raise _not_the_daemon(target, f"it answered {exc.response.status_code}", args) from None
        raise ConnectFailed(_refusal(exc, target)) from None
    except TimeoutError:
        raise ConnectFailed(
            f"{target.url} did not complete the WebSocket handshake within {_OPEN_TIMEOUT_S:g} s"
        ) from None
    except InvalidHandshake as exc:
        if target.found is not None:
            raise _not_the_daemon(target, f"not a WebSocket answer: {exc}", args) from None
        raise ConnectFailed(f"cannot connect to {target.url}: {exc}") from None
    except OSError as exc:
        raise ConnectFailed(f"cannot connect to {target.url}: {exc}") from None
    try:
        dialed = target.url if target.daemon is not None else None
        answered = socket.response  # set once the handshake succeeded
        proof = challenge.answer(answered.headers if answered is not None else {}, dialed)
    except ValueError as exc:
        socket.close_socket()  # not even a close frame: nothing goes to it
        if target.found is not None:
            raise _not_the_daemon(target, str(exc), args) from None
        raise ConnectFailed(
            f"the program at {target.url} did not prove it holds the token from "
            f"{target.token_from} ({exc}): either that token is wrong or another program "
            "listens there; nothing was sent to it"
        ) from None
    try:
        socket.send(proof)
    except (OSError, ConnectionClosed) as exc:
        socket.close()
        raise ConnectFailed(f"the daemon at {target.url} closed the connection: {exc}") from None
    logger.info("connected to %s", target.url)
    return socket


def _not_the_daemon(target: _Target, why: str, args: argparse.Namespace) -> _NoDaemon:
    """The listener at a ``serve.json``'s address is not the daemon that wrote it."""
    assert target.found is not None
    what = (
        f"the program listening at {target.url} did not prove it is the daemon named in "
        f"{target.found.path} ({why}); nothing was sent to it"
    )
    return _stale(target.found, what, "not-the-daemon", args)


def _refusal(refused: InvalidStatus, target: _Target) -> str:
    response = refused.response
    code = response.status_code
    reason = bytes(response.body or b"").decode(errors="replace").strip()
    said = f"{code} {reason or response.reason_phrase}"
    if code == http.HTTPStatus.UNAUTHORIZED:
        return f"the daemon refused the token from {target.token_from} ({said}) at {target.url}"
    return f"the daemon at {target.url} refused the connection ({said})"
