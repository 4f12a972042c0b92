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

from websockets.exceptions import InvalidHandshake, InvalidStatus, InvalidURI
from websockets.sync.client import ClientConnection, connect

from toolprep.runtime.assembly import configure_logging, default_data_dir
from toolprep.runtime.daemon.autostart import SERVE_LOG, StartFailed, start_daemon, starting_alone
from toolprep.runtime.daemon.bridge import run_bridge
from toolprep.runtime.daemon.discovery import DaemonFileError, read_daemon_file
from toolprep.runtime.daemon.serve_token import TOKEN_ON_COMMAND_LINE, TOKEN_VARIABLE, serve_token
from toolprep.runtime.stop_signals import StopSignals

__all__ = ["ConnectFailed", "run_connect"]

logger = logging.getLogger(__name__)

_PREFIX: Final = "toolprep connect: "
_OPEN_TIMEOUT_S: Final = 30.0


class ConnectFailed(Exception):
    """No connection to the daemon: the one line to print."""


_Absence = Literal["no-daemon-file", "nothing-listening"]


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
            socket = _open(args, os.environ)
        except ConnectFailed as exc:
            print(f"{_PREFIX}{exc}", file=sys.stderr, flush=True)
            return 2
        # Unbuffered: the stdin thread may still be blocked reading when the process exits,
        # and a buffered stream's lock held by it would abort interpreter shutdown.
        protocol_in = open(sys.stdin.fileno(), "rb", buffering=0, closefd=False)  # noqa: SIM115
        outcome = run_bridge(
            socket, protocol_in, protocol_out, args.max_message_bytes, lambda: stop.requested
        )
        if outcome.detail:
            print(f"{_PREFIX}{outcome.detail}", file=sys.stderr, flush=True)
        return outcome.exit_status
    finally:
        stop.restore()


def _open(args: argparse.Namespace, environ: Mapping[str, str]) -> ClientConnection:
    """The open WebSocket to the daemon, started first with ``--start`` if none answers."""
    if args.token is not None:
        raise ConnectFailed(f"--token: {TOKEN_ON_COMMAND_LINE}")
    if args.max_message_bytes < 1:
        raise ConnectFailed(f"--max-message-bytes must be >= 1, got {args.max_message_bytes}")
    data_dir = _data_dir(args.data_dir)
    if args.url is not None:
        if args.start:
            raise ConnectFailed(
                "--start goes without --url: it starts the daemon of the data directory"
            )
        return _handshake(_named_target(args.url, args.token_file, environ), args)
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
        return _handshake(_discovered_target(data_dir, args), args)
    except _NoDaemon as absent:
        if not args.start:
            raise
        logger.info("no daemon answers (%s): starting one", absent.absence)
    try:
        with starting_alone(data_dir):
            try:  # started by another connect --start while this one waited?
                return _handshake(_discovered_target(data_dir, args), args)
            except _NoDaemon:
                pass
            address = start_daemon(data_dir, args.serve_options, environ, args.start_timeout)
    except (StartFailed, OSError) as exc:
        raise ConnectFailed(f"--start: {exc}") from None
    print(
        f"{_PREFIX}started toolprep serve (pid {address.pid}) on {address.url}; "
        f"its log: {data_dir / SERVE_LOG}",
        file=sys.stderr,
        flush=True,
    )
    return _handshake(_Target(address.url, address.token, "serve.json"), args)


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
    try:
        address = read_daemon_file(data_dir)
    except DaemonFileError as exc:
        raise _NoDaemon(f"{exc} ({_how_to_start(args)})", "no-daemon-file") from None
    return _Target(address.url, address.token, f"serve.json in {data_dir}")


def _how_to_start(args: argparse.Namespace) -> str:
    if args.url is not None:
        return "start it with `toolprep serve`"
    serve = "toolprep serve"
    if args.data_dir is not None:
        serve += f" --data-dir {args.data_dir}"
    return f"start it with `{serve}`, or pass --start"


def _handshake(target: _Target, args: argparse.Namespace) -> ClientConnection:
    """The WebSocket open and authenticated, or ``ConnectFailed`` saying why not."""
    try:
        socket = connect(
            target.url,
            additional_headers={"Authorization": f"Bearer {target.token}"},
            max_size=args.max_message_bytes,
            compression=None,
            open_timeout=_OPEN_TIMEOUT_S,
            legacy=True,
        )
    except ConnectionRefusedError:
        raise _NoDaemon(
            f"connection refused: nothing is listening at {target.url} ({_how_to_start(args)})",
            "nothing-listening",
        ) from None
    except InvalidURI as exc:
        raise ConnectFailed(f"{target.url} is not a WebSocket URL: {exc}") from None
    except InvalidStatus as exc:
        raise ConnectFailed(_refusal(exc, target)) from None
    except TimeoutError:
        raise ConnectFailed(
            f"{target.url} did not complete the WebSocket handshake within {_OPEN_TIMEOUT_S:g} s"
        ) from None
    except (OSError, InvalidHandshake) as exc:
        raise ConnectFailed(f"cannot connect to {target.url}: {exc}") from None
    logger.info("connected to %s", target.url)
    return socket


def _refusal(refused: InvalidStatus, target: _Target) -> str:
    response = refused.response
    code = response.status_code
    reason = bytes(response.body or b"").decode(errors="replace").strip()
    said = f"{code} {reason or response.reason_phrase}"
    if code == http.HTTPStatus.UNAUTHORIZED:
        return f"the daemon refused the token from {target.token_from} ({said}) at {target.url}"
    return f"the daemon at {target.url} refused the connection ({said})"
