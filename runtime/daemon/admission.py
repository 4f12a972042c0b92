"""Who may open a WebSocket on the daemon: the checks on an upgrade request's headers.

The daemon runs tools on its user's machine, so a connection is a shell.
Editors and tools are its clients; web pages are not, and a browser lets
any page open a WebSocket to ``127.0.0.1``. Three checks keep pages out:

- ``Origin``: a browser always sends it on a WebSocket upgrade, and a page
  cannot forge it; an upgrade that carries one is refused unless the origin
  was allowed with ``--allow-origin``. ``null`` (sandboxed frames, local
  files, redirects) is shared by every such page and is never allowed.
- ``Host``: on a loopback address, a page whose name was rebound to
  ``127.0.0.1`` (DNS rebinding) still sends its own name; only loopback
  names are accepted (``localhost``, ``127.x.y.z``, ``[::1]``; the bound
  address is one of them). The port is not compared, so a forwarded port
  (``ssh -L``) keeps working.
- The token: ``Authorization: Bearer <token>``, compared in constant time;
  or, from ``toolprep connect``, a ``Toolprep-Challenge`` nonce
  (``daemon_proof``): the upgrade goes on, the daemon proves the token in
  its answer, and the connection's first message must prove it back before
  any other is read. One of the two is always required, never both.

Every malformed header is an answer (400, 401, 403 or 421) with a plain
reason, never an exception: the library would turn one into a 500 and a
traceback in the log.

The plain GETs beside the WebSocket (``check_plain``: ``/metrics``, ``/healthz``,
``/readyz``) keep the ``Host`` and ``Origin`` checks, which cost a scraper or a
load balancer nothing (neither sends a foreign ``Host`` nor any ``Origin``) and
keep pages from reading them; ``/metrics`` also needs the bearer token (a
challenge is for upgrades only: a scrape has no first message to prove it with).
"""

from __future__ import annotations

import hmac
import http
import ipaddress
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from websockets.datastructures import Headers

from toolprep.runtime.daemon.daemon_proof import CHALLENGE_HEADER, is_nonce

__all__ = [
    "Admission",
    "Challenged",
    "Refusal",
    "is_loopback",
    "normalized_origin",
    "parse_allowed_origin",
]

_NULL_ORIGIN: Final = "null"


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why an upgrade is refused: the HTTP status and a one-line reason for the client."""

    status: http.HTTPStatus
    reason: str


@dataclass(frozen=True, slots=True)
class Challenged:
    """Admitted on a challenge: the WebSocket opens, and its first message must prove the token
    (``daemon_proof``); ``nonce`` is the client's."""

    nonce: str


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 with or without brackets) is loopback."""
    host = host.lower()
    if host == "localhost":
        return True
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def normalized_origin(value: str) -> str | None:
    """``scheme://host[:port]`` in lower case, or None if ``value`` is not such an origin."""
    if not value.isascii() or not value.isprintable() or " " in value:
        return None
    try:
        parts = urlsplit(value.strip())
    except ValueError:
        return None
    if not parts.scheme or not parts.netloc or parts.query or parts.fragment:
        return None
    if parts.path not in ("", "/") or "@" in parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}".lower()


def parse_allowed_origin(value: str) -> str:
    """An ``--allow-origin`` value, normalized; ``ValueError`` saying why it cannot be allowed."""
    if value.strip().lower() == _NULL_ORIGIN:
        raise ValueError(
            "--allow-origin null: the 'null' origin is what every sandboxed frame, local "
            "file and redirected page sends, so allowing it would let any page in; it is "
            "never allowed"
        )
    origin = normalized_origin(value)
    if origin is None:
        raise ValueError(
            f"--allow-origin {value!r} is not an origin: give scheme://host[:port], "
            "e.g. https://editor.example"
        )
    return origin


def _host_name(value: str) -> str | None:
    """The name in a ``Host`` header (``name``, ``name:port``, ``[v6]``, ``[v6]:port``)."""
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[: end + 1], value[end + 1 :]
    else:
        name, colon, port = value.partition(":")
        rest = colon + port
    if rest and not (rest.startswith(":") and rest[1:].isdigit() and 0 < int(rest[1:]) < 65536):
        return None
    return name.lower() or None


class Admission:
    """The checks for one daemon: its token, its allowed origins, the names its Host may carry.

    ``bound_host`` is the ``--host`` the daemon listens on; when it is a
    loopback address, ``Host`` is checked too. On any other address the
    daemon answers to names this process cannot know, and the token and the
    ``Origin`` check are what keep strangers and pages out.
    """

    def __init__(self, token: str, allowed_origins: frozenset[str], bound_host: str) -> None:
        if not token:
            raise ValueError("the daemon's token is empty")
        self._expected = token.encode("ascii")
        self._origins = allowed_origins
        self._check_host = is_loopback(bound_host)

    def check(self, headers: Headers) -> Refusal | Challenged | None:
        """None if the upgrade may go on, ``Challenged`` if it may on a proof still to come,
        else why not."""
        return self._host(headers) or self._origin(headers) or self._authorization(headers)

    def check_plain(self, headers: Headers, *, token: bool) -> Refusal | None:
        """None if a plain GET may be answered: ``Host`` and ``Origin`` as for an upgrade,
        and with ``token`` the bearer token."""
        refused = self._host(headers) or self._origin(headers)
        if refused is not None or not token:
            return refused
        if headers.get_all(CHALLENGE_HEADER):
            return Refusal(
                http.HTTPStatus.UNAUTHORIZED,
                f"{CHALLENGE_HEADER} is for WebSocket upgrades; send Authorization: Bearer <token>",
            )
        return self._bearer(headers.get_all("Authorization"))

    def _host(self, headers: Headers) -> Refusal | None:
        if not self._check_host:
            return None
        values = headers.get_all("Host")
        if len(values) != 1:
            return Refusal(http.HTTPStatus.BAD_REQUEST, "exactly one Host header is required")
        name = _host_name(values[0].strip()) if values[0].isascii() else None
        if name is None or not is_loopback(name):
            return Refusal(
                http.HTTPStatus.MISDIRECTED_REQUEST,
                "this daemon serves only loopback names (localhost, 127.0.0.1, [::1])",
            )
        return None

    def _origin(self, headers: Headers) -> Refusal | None:
        values = headers.get_all("Origin")
        if not values:
            return None
        if len(values) == 1 and normalized_origin(values[0]) in self._origins:
            return None
        return Refusal(
            http.HTTPStatus.FORBIDDEN,
            "web pages may not connect to toolprep serve (this origin was not allowed "
            "with --allow-origin)",
        )

    def _authorization(self, headers: Headers) -> Refusal | Challenged | None:
        values = headers.get_all("Authorization")
        challenges = headers.get_all(CHALLENGE_HEADER)
        if challenges:
            return _challenge(challenges, bool(values))
        return self._bearer(values)

    def _bearer(self, values: list[str]) -> Refusal | None:
        """None if ``values`` (the ``Authorization`` headers) carry the token."""
        if not values:
            return Refusal(http.HTTPStatus.UNAUTHORIZED, "missing Authorization: Bearer <token>")
        if len(values) > 1:
            return Refusal(http.HTTPStatus.BAD_REQUEST, "more than one Authorization header")
        value = values[0]
        if not value.isascii():
            return Refusal(http.HTTPStatus.BAD_REQUEST, "the Authorization header is not ASCII")
        scheme, _, credentials = value.strip().partition(" ")
        if scheme.lower() != "bearer":
            return Refusal(http.HTTPStatus.UNAUTHORIZED, "the Authorization scheme must be Bearer")
        if not hmac.compare_digest(credentials.strip().encode("ascii"), self._expected):
            return Refusal(http.HTTPStatus.UNAUTHORIZED, "wrong token")
        return None


def _challenge(values: list[str], with_authorization: bool) -> Refusal | Challenged:
    if with_authorization:
        return Refusal(
            http.HTTPStatus.BAD_REQUEST,
            f"both Authorization and {CHALLENGE_HEADER}: authenticate one way",
        )
    if len(values) > 1:
        return Refusal(http.HTTPStatus.BAD_REQUEST, f"more than one {CHALLENGE_HEADER} header")
    if not is_nonce(values[0].strip()):
        return Refusal(
            http.HTTPStatus.BAD_REQUEST,
            f"{CHALLENGE_HEADER} must be 32 random bytes in base64url (43 characters)",
        )
    return Challenged(values[0].strip())
