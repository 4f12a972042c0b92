"""The daemon's bearer token: from ``--token-file``, from ``TOOLPREP_TOKEN``, or made up.

A token on the command line would be readable by every process of the
machine (``/proc/PID/cmdline``), including every command a tool runs, so
``--token`` is refused and the token comes from a file or the environment.
With neither, the daemon makes up one and publishes it in its daemon file
(``discovery``), readable by its user only. An empty token is refused
rather than read as "no authentication".
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, assert_never

from toolprep.runtime.daemon.admission import is_loopback
from toolprep.runtime.tools.environment import SERVE_TOKEN_VARIABLE

__all__ = [
    "MIN_REMOTE_TOKEN_CHARS",
    "TOKEN_ON_COMMAND_LINE",
    "TOKEN_VARIABLE",
    "ServeToken",
    "TokenSource",
    "check_served_token",
    "check_token_for_host",
    "serve_token",
]

TOKEN_VARIABLE: Final = SERVE_TOKEN_VARIABLE
TOKEN_ON_COMMAND_LINE: Final = (
    "a token on the command line is readable by every process of this machine: "
    f"use --token-file or {TOKEN_VARIABLE}"
)

MIN_REMOTE_TOKEN_CHARS: Final = 16
"""The shortest token served on a non-loopback address: 16 printable characters, about 100
bits even when drawn from letters and digits only, too many to guess over the network."""

TokenSource = Literal["token-file", "environment", "generated"]


@dataclass(frozen=True, slots=True)
class ServeToken:
    value: str
    source: TokenSource


def _checked(token: str, where: str) -> str:
    if not token:
        raise ValueError(f"{where} is empty: an empty token would let anyone in")
    if not all("!" <= c <= "~" for c in token):
        raise ValueError(
            f"{where} holds spaces or characters other than printable ASCII: "
            "the token travels in an HTTP header"
        )
    return token


def _from_file(token_file: str) -> str:
    path = Path(token_file).expanduser()
    where = f"the token file {path}"
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {where}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError(f"{where} is not ASCII: the token travels in an HTTP header") from None
    lines = text.splitlines()
    return _checked(lines[0].strip() if lines else "", where)


def serve_token(token_file: str | None, environ: Mapping[str, str]) -> ServeToken:
    """The token the daemon requires: ``--token-file``'s first line, else ``TOOLPREP_TOKEN``,
    else a new random one. ``ValueError`` for an empty or unreadable one."""
    if token_file is not None:
        return ServeToken(_from_file(token_file), "token-file")
    if TOKEN_VARIABLE in environ:
        return ServeToken(_checked(environ[TOKEN_VARIABLE].strip(), TOKEN_VARIABLE), "environment")
    return ServeToken(secrets.token_urlsafe(32), "generated")


def check_served_token(token: str, host: str, where: str = "the token") -> None:
    """``ValueError`` unless ``token`` may guard a server on ``host``: never empty, printable
    ASCII (it travels in a header), and on a non-loopback address, where anyone on the
    network may try it, at least ``MIN_REMOTE_TOKEN_CHARS`` long."""
    _checked(token, where)
    if not is_loopback(host) and len(token) < MIN_REMOTE_TOKEN_CHARS:
        raise ValueError(
            f"refusing to serve on {host} with {where} of {len(token)} characters: a "
            f"non-loopback address needs at least {MIN_REMOTE_TOKEN_CHARS}, or it can be guessed"
        )


def check_token_for_host(token: ServeToken, host: str) -> None:
    """A non-loopback address needs a token its remote clients were given, not a made-up one,
    and one long enough not to be guessed."""
    match token.source:
        case "token-file":
            check_served_token(token.value, host, "the token file's token")
        case "environment":
            check_served_token(token.value, host, TOKEN_VARIABLE)
        case "generated":
            if not is_loopback(host):
                raise ValueError(
                    f"refusing to serve on {host} with a made-up token: a non-loopback "
                    f"address needs --token-file or {TOKEN_VARIABLE}"
                )
        case _:
            assert_never(token.source)
