"""``toolprep connect``: the agent command an editor launches to use a running daemon's
sessions, bridging stdio to its WebSocket."""

from __future__ import annotations

import argparse

from toolprep.runtime.daemon.serve_options import DEFAULT_REPLY_TIMEOUT_S

__all__ = ["add_connect_command", "run_connect_command"]


def add_connect_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
        "process), its output in DIR/serve.log (rotated by size: serve's --log-max-bytes and "
        "--log-backups), and connect to it; its provider key comes from this environment "
        "(default: exit with status 2)",
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


def run_connect_command(args: argparse.Namespace) -> int:
    from toolprep.runtime.daemon.connect import run_connect

    return run_connect(args)
